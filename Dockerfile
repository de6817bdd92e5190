# fenceproxy in a small image: build with the Go toolchain, run from distroless.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/fenceproxy ./cmd/fenceproxy

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fenceproxy /fenceproxy
VOLUME /data
EXPOSE 7379 9121
ENTRYPOINT ["/fenceproxy", "--listen", "0.0.0.0:7379", "--metrics-listen", "0.0.0.0:9121", "--data-dir", "/data"]
