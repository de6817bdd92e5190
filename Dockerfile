# fenceproxy in a small image: build with the Go toolchain, run from distroless.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/fenceproxy ./cmd/fenceproxy
# The data dir is made here (distroless has no shell) and copied in owned by
# the user the image runs as: a volume Docker creates for /data takes the
# image's /data owner, so fenceproxy can write its fence store there. (A
# host directory bind-mounted on /data keeps its own owner: chown it to
# 65532.)
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
# distroless's "nonroot" user, by number: the owner of /data below.
USER 65532:65532
COPY --from=build /out/fenceproxy /fenceproxy
COPY --from=build --chown=65532:65532 /out/data /data
VOLUME /data
EXPOSE 7379 9121
ENTRYPOINT ["/fenceproxy", "--listen", "0.0.0.0:7379", "--metrics-listen", "0.0.0.0:9121", "--data-dir", "/data"]
