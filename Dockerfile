# Troupe: one image for both the webhook and the reconciler.
#   webhook:    docker run IMAGE webhook serve --tls-cert ... --tls-key ...
#   reconciler: docker run IMAGE reconciler run --config /etc/troupe/config.yaml
FROM python:3.11.10-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY troupe ./troupe
COPY certs ./certs
COPY webhook ./webhook
COPY reconciler ./reconciler
RUN pip install --no-cache-dir --prefix=/install .

FROM python:3.11.10-slim-bookworm
LABEL org.opencontainers.image.title="troupe" \
      org.opencontainers.image.description="Gang scheduling, topology-aware placement and shared device groups for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /install /usr/local
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
ENTRYPOINT ["python", "-m"]
CMD ["reconciler", "--help"]
