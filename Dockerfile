# The idem image: one static binary on an empty base, run as a non-root user.
#
# Build it with scripts/image (docs/operations.md, "Container image"), which
# compiles the binary on the host and lays out the build context this file
# expects, so that the build pulls no base image:
#
#   idem                  CGO_ENABLED=0 go build -trimpath -tags timetzdata
#                         (static; the SQLite driver is pure Go; time zone
#                         data embedded)
#   ca-certificates.crt   the build machine's CA bundle, for TLS to
#                         PostgreSQL, brokers and webhook receivers
#   data/                 an empty directory: the /data volume's mount point
FROM scratch

# The builder sets TARGETOS, TARGETARCH and TARGETPLATFORM from
# scripts/image's --platform; nothing here needs them (the binary was
# cross-compiled for it), but an argument no ARG declares draws a "build
# args were not consumed" warning, so they are declared and kept as labels.
ARG TARGETOS
ARG TARGETARCH
ARG TARGETPLATFORM
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=https://github.com/idemhq/idem
LABEL org.opencontainers.image.title="idem" \
      org.opencontainers.image.description="Makes retried work happen once: idempotency keys, a double-entry ledger, a transactional outbox." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="${SOURCE}" \
      io.idem.image.os="${TARGETOS}" \
      io.idem.image.arch="${TARGETARCH}" \
      io.idem.image.platform="${TARGETPLATFORM}"

COPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY idem /idem
# A scratch image has no shell to chown at start, so the volume's directory
# is created here, owned by the user the process runs as.
COPY --chown=65532:65532 data /data

# Settings are environment variables rather than CMD flags: flags win over
# the environment, so flags here would silently beat an operator's
# IDEM_DB=postgres://… . Without API keys (IDEM_API_KEYS) serve refuses a
# non-loopback address and exits: set them.
ENV IDEM_ADDR=0.0.0.0:8080 \
    IDEM_DB=sqlite:/data/idem.db
WORKDIR /data
VOLUME /data
EXPOSE 8080
USER 65532:65532
ENTRYPOINT ["/idem"]
CMD ["serve"]
