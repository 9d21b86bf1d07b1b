# syntax=docker/dockerfile:1
# Multi-arch build (linux/amd64 and linux/arm64) of a static controller binary in a minimal non-root image:
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t karpenter-azure .
#
# The build stage runs on the build machine's platform and cross-compiles for the image's (BuildKit's
# TARGETARCH) with cargo-zigbuild, zig being the C compiler ring needs; both come from PyPI. It links
# statically against musl, so the final image needs no libc, no loader and no shell. TLS roots for Azure
# are compiled in (webpki-roots); in a pod the API server's CA comes from the service-account volume.
#
# hack/image-build.sh runs the build stage's steps as written, without a container engine, and
# tests/container_image.rs checks what it builds for both architectures. Keep each instruction on one line.
FROM --platform=$BUILDPLATFORM rust:1.95-alpine AS build
ARG TARGETARCH
RUN apk add --no-cache musl-dev python3 py3-pip
RUN pip install --break-system-packages ziglang==0.17.1 cargo-zigbuild==0.24.1
RUN rustup target add x86_64-unknown-linux-musl aarch64-unknown-linux-musl
ENV CARGO_TARGET_DIR=/src/target
WORKDIR /src
# The dependency layer: the manifests and the lock file with empty sources. Docker rebuilds it only when
# they change, so a change to the sources compiles the project's own crates and nothing else.
COPY Cargo.toml Cargo.lock ./
COPY crates/core/Cargo.toml crates/core/
COPY crates/fake-azure/Cargo.toml crates/fake-azure/
RUN case "$TARGETARCH" in amd64) echo x86_64-unknown-linux-musl ;; arm64) echo aarch64-unknown-linux-musl ;; *) echo "unsupported TARGETARCH $TARGETARCH" >&2; exit 1 ;; esac > .rust-target
RUN mkdir -p src crates/core/src crates/fake-azure/src && echo 'fn main() {}' > src/main.rs && touch src/lib.rs crates/core/src/lib.rs crates/fake-azure/src/lib.rs
RUN cargo zigbuild --release --locked --target "$(cat .rust-target)" --bin karpenter-azure
# The sources. Their files keep the times they had in the build context, older than the stub build:
# touching the crate roots makes cargo compile the real sources.
COPY . .
RUN touch src/main.rs src/lib.rs crates/core/src/lib.rs crates/fake-azure/src/lib.rs
RUN cargo zigbuild --release --locked --target "$(cat .rust-target)" --bin karpenter-azure
RUN cp "$CARGO_TARGET_DIR/$(cat .rust-target)/release/karpenter-azure" /karpenter-azure

FROM scratch
COPY --from=build /karpenter-azure /karpenter-azure
# The chart's securityContext runs it as 65532 too; the image is non-root on its own.
USER 65532:65532
ENTRYPOINT ["/karpenter-azure"]
CMD ["controller"]
