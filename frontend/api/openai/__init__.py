"""vllm_pyfrontend.api.openai."""
