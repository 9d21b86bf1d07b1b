# syntax=docker/dockerfile:1
# Multi-arch build of a static controller binary in a minimal non-root image:
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t <registry>/karpenter-azure:<tag> --push .
#
# The build stage runs on the build machine's own platform and cross-compiles for the target one
# (TARGETARCH) with cargo-zigbuild, Zig as the C compiler and linker for the musl targets (ring compiles
# C), so an amd64 machine builds the arm64 image without emulation and the other way round. musl links
# statically: the final image needs no libc, no loader and no shell. TLS roots for Azure are compiled in
# (webpki-roots); in a pod the API server's CA comes from the service-account volume.
#
# Two layers hold the Rust build: the dependencies, built from the manifests and stub sources, and then
# the project. A source change rebuilds only the second; a manifest or lock change rebuilds both.
# hack/image-build.sh runs the same steps without a container engine (tests/container_image.rs).
FROM --platform=$BUILDPLATFORM rust:1.95-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends python3-pip && rm -rf /var/lib/apt/lists/*
RUN pip3 install --no-cache-dir --break-system-packages ziglang==0.17.1 cargo-zigbuild==0.24.1
RUN rustup target add x86_64-unknown-linux-musl aarch64-unknown-linux-musl
ARG TARGETARCH
WORKDIR /src

# Layer 1: the dependencies. Only the manifests, the lock file and the build script are copied; every
# target the manifests name is a stub, so this layer's cache key changes only with the dependencies.
COPY Cargo.toml Cargo.lock build.rs ./
COPY crates/core/Cargo.toml crates/core/
COPY crates/fake-azure/Cargo.toml crates/fake-azure/
COPY hack/image-cargo.sh hack/
RUN hack/image-cargo.sh stubs
RUN hack/image-cargo.sh deps

# Layer 2: the project, over the stubs.
COPY . .
RUN hack/image-cargo.sh build
RUN hack/image-cargo.sh install out/karpenter-azure

FROM scratch
COPY --from=build /src/out/karpenter-azure /karpenter-azure
# The chart's securityContext runs it as 65532 too; the image is non-root on its own.
USER 65532:65532
ENTRYPOINT ["/karpenter-azure"]
CMD ["controller"]
