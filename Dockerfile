# Small, non-root image of `orderly serve` (README.md "Observability"; deploy/compose.yaml).
# Build: docker build -t orderly .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/orderly ./cmd/orderly

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/orderly /usr/local/bin/orderly
USER nonroot:nonroot
WORKDIR /home/nonroot
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/orderly"]
CMD ["serve"]
