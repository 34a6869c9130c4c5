# Troupe: one image for both the webhook and the reconciler.
#   webhook:    docker run IMAGE webhook serve --tls-cert ... --tls-key ...
#   reconciler: docker run IMAGE reconciler run --config /etc/troupe/config.yaml
#
# Reproducible by construction: the base is pinned by version, and every Python package is
# installed from requirements.lock by exact version and sha256 (--require-hashes), so two
# builds install the same files. Regenerate the lock after changing pyproject.toml's
# dependencies with `make lock` (uv pip compile --generate-hashes; see
# docs/decisions/010-webhook-certificates.md, "The image").
FROM python:3.11.10-slim-bookworm AS build
WORKDIR /src
COPY requirements.lock ./
RUN pip install --no-cache-dir --no-deps --require-hashes --prefix=/install -r requirements.lock

FROM python:3.11.10-slim-bookworm
LABEL org.opencontainers.image.title="troupe" \
      org.opencontainers.image.description="Gang scheduling, topology-aware placement and shared device groups for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /install /usr/local
# Troupe's own packages run from source (no build step, nothing downloaded at build time).
COPY troupe /app/troupe
COPY certs /app/certs
COPY webhook /app/webhook
COPY reconciler /app/reconciler
ENV PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["python", "-m"]
CMD ["reconciler", "--help"]
