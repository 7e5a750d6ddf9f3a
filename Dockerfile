# One image for the web, worker, beat and migration containers of docker-compose.yml.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY auditor ./auditor
COPY workers ./workers
COPY migrations ./migrations
# Editable: the Alembic scripts in ./migrations are found next to the package.
RUN pip install -e . && useradd --create-home --uid 10001 auditor
USER auditor
ENV AUDITOR_INSTANCE_PATH=/home/auditor/instance
EXPOSE 8000
CMD ["gunicorn", "--bind", "0.0.0.0:8000", "--workers", "4", "auditor.web:create_app()"]
