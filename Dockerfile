# Small, non-root image of `orderly serve` (docs/operations/deploy.md; deploy/compose.yaml).
# Build: docker build --build-arg VERSION=v1.2.0 --build-arg REVISION=$(git rev-parse HEAD) -t orderly .
# VERSION is what `orderly --version` prints and the image's version label.
ARG VERSION=dev
ARG REVISION=

FROM golang:1.26-bookworm AS build
ARG VERSION
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.stampedVersion=${VERSION}" -o /out/orderly ./cmd/orderly

FROM gcr.io/distroless/static-debian12:nonroot
ARG VERSION
ARG REVISION
LABEL org.opencontainers.image.title="orderly" \
      org.opencontainers.image.description="Order-lifecycle engine: orders, payments, stock and timeouts that never disagree" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.source="https://github.com/orderlyhq/orderly" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="The orderly authors"
COPY --from=build /out/orderly /usr/local/bin/orderly
USER nonroot:nonroot
WORKDIR /home/nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/orderly"]
CMD ["serve"]
