# Multi-stage build of a static controller binary in a minimal non-root image.
FROM rust:1.95-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin karpenter-azure \
 && cp target/release/karpenter-azure /karpenter-azure

FROM scratch
COPY --from=build /karpenter-azure /karpenter-azure
USER 65532:65532
ENTRYPOINT ["/karpenter-azure"]
CMD ["controller"]
