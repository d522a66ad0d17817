# Container image of dynamo for Deno: `dynamo run|frontend|serve|...` on the pinned Deno.
#
#   docker build -t dynamo-deno:latest .
#   docker run --rm -p 8000:8000 dynamo-deno:latest            # run in=http out=echo
#   docker run --rm dynamo-deno:latest frontend --http-port 8000  # any dynamo command
#
# Stages: `native` builds the KV-transfer library from source (Rust, std only, offline),
# `deno` fetches the pinned Deno binary (checked against its npm sha512), `deps` installs the
# npm packages from deno.lock alone (a layer that changes only with deno.json/deno.lock), and
# the runtime stage adds the sources on top and runs as a non-root user.
# Every stage starts from BASE_IMAGE (Debian bookworm); where Docker Hub cannot be reached,
# scripts/docker_base_image.sh makes one from Debian packages.
# Only the legacy builder's features are used: BuildKit is not needed.

ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS native
# rustc-web/cargo-web: bookworm's current Rust (the plain rustc package is 1.63).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        cargo-web rustc-web gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY native/Cargo.toml native/Cargo.lock native/build.rs native/
# The crates (deno_bindgen's macro, linkme) in their own layer, fetched by the lock file.
RUN mkdir -p native/src && touch native/src/lib.rs \
    && cargo fetch --locked --manifest-path native/Cargo.toml
COPY native/cuda native/cuda
COPY native/src native/src
RUN cargo build --release --offline --locked --manifest-path native/Cargo.toml

FROM ${BASE_IMAGE} AS deno
# linux/amd64: the npm package (@deno/linux-arm64-glibc for arm64) and its checksum are
# per platform.
ARG DENO_VERSION=2.9.6
# sha512 of npm's @deno/linux-x64-glibc@2.9.6 tarball (its registry "integrity", in hex).
ARG DENO_SHA512=de67784ca2c2bb3b0b0e67cea02e4a37b34065ac525643209bae2f83a7e80f4d090400c2a584b6ff942a5dfce09cfe59433de22cff6f05026d120735d7a380a1
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && curl -fsSL --retry 3 -o /tmp/deno.tgz \
        "https://registry.npmjs.org/@deno/linux-x64-glibc/-/linux-x64-glibc-${DENO_VERSION}.tgz" \
    && echo "${DENO_SHA512}  /tmp/deno.tgz" | sha512sum -c - \
    && tar -xzf /tmp/deno.tgz -C /tmp package/deno \
    && install -m 0755 /tmp/package/deno /usr/local/bin/deno \
    && rm -rf /tmp/deno.tgz /tmp/package \
    && deno --version

FROM deno AS deps
# The system's CA store too: a build behind a TLS-intercepting proxy adds its CA there.
ENV DENO_DIR=/opt/deno-dir DENO_NO_UPDATE_CHECK=1 DENO_TLS_CA_STORE=system,mozilla
WORKDIR /app
# The npm packages, from the lockfile only: this layer is rebuilt when deno.json or
# deno.lock change, not when the sources do.
COPY deno.json deno.lock ./
RUN deno install --frozen --quiet

FROM ${BASE_IMAGE}
RUN groupadd --system --gid 10001 dynamo \
    && useradd --system --uid 10001 --gid dynamo --home-dir /app --shell /usr/sbin/nologin dynamo \
    && install -d -o dynamo -g dynamo /app /var/cache/deno
COPY --from=deno /usr/local/bin/deno /usr/local/bin/deno
ENV DENO_DIR=/var/cache/deno \
    DENO_NO_UPDATE_CHECK=1 \
    DENO_NO_PROMPT=1 \
    DYN_HEALTH_URL=http://127.0.0.1:8000/live
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY . .
COPY --from=native /src/native/target/release/libdynamo_native.so native/target/release/
USER dynamo
EXPOSE 8000
# The frontend's /live (or a worker's system port, DYN_SYSTEM_PORT: set DYN_HEALTH_URL).
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["deno", "eval", "const r = await fetch(Deno.env.get('DYN_HEALTH_URL'), { signal: AbortSignal.timeout(4000) }); Deno.exit(r.ok ? 0 : 1);"]
ENTRYPOINT ["/app/dynamo"]
CMD ["run", "in=http", "out=echo", "--http-host", "0.0.0.0", "--http-port", "8000"]
