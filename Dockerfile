# Multi-stage build of a static controller binary in a minimal non-root image.
#
# The build is the one tests/container_image.rs runs (it reads the `cargo build` and the COPY lines below):
# a release build for the musl target, which links statically, so the final image needs no libc, no
# loader and no shell. TLS roots for Azure are compiled in (webpki-roots); in a pod the API server's CA
# comes from the service-account volume.
FROM rust:1.95-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin karpenter-azure
RUN cp target/x86_64-unknown-linux-musl/release/karpenter-azure /karpenter-azure

FROM scratch
COPY --from=build /karpenter-azure /karpenter-azure
# The chart's securityContext runs it as 65532 too; the image is non-root on its own.
USER 65532:65532
ENTRYPOINT ["/karpenter-azure"]
CMD ["controller"]
