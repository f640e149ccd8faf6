"""vllm_pyfrontend.api.admin."""
