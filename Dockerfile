# Image for the worker and the action service in docker-compose.yml.
FROM python:3.11-slim
WORKDIR /srv/fraudstream
COPY pyproject.toml README.md ./
COPY app ./app
COPY models ./models
RUN pip install --no-cache-dir '.[rocksdb]'
ENV FRAUDSTREAM_MODEL_DIR=/srv/fraudstream/models
