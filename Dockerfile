# One image for the web, worker, beat and migration containers of docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY requirements.lock requirements-test.lock ./
# The locked dependencies first (a layer that changes only with the lock), then the
# package itself, non-editable: the Alembic scripts ship inside it.
RUN pip install -r requirements.lock
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY auditor ./auditor
COPY migrations ./migrations
# Optional extras, e.g. the connectors (`--build-arg INSTALL_EXTRAS=mlflow,labelstudio`),
# within the pins of requirements-test.lock, which locks every extra.
ARG INSTALL_EXTRAS=""
RUN pip install --no-deps . \
    && if [ -n "$INSTALL_EXTRAS" ]; then pip install -c requirements-test.lock ".[$INSTALL_EXTRAS]"; fi \
    && rm -rf /app/auditor /app/migrations \
    && useradd --create-home --uid 10001 auditor
USER auditor
ENV AUDITOR_INSTANCE_PATH=/home/auditor/instance
EXPOSE 8000
CMD ["gunicorn", "-c", "python:auditor.web.gunicorn_conf", "--bind", "0.0.0.0:8000", "--workers", "4", "auditor.web:create_app()"]
