# The dbtap agent in a container (README, "Install": Docker).
#
# Build:  docker build --build-arg DBTAP_GIT_REVISION=$(git rev-parse --short=12 HEAD) -t dbtap .
# (.git is not sent to the builder: the revision label of dbtap_build_info comes from the arg.)
# Run the live agent on the host's network, with the capture capabilities (not --privileged):
#   docker run -d --name dbtap --network host --pid host \
#     --cap-add NET_RAW --cap-add NET_ADMIN --cap-add BPF --cap-add PERFMON \
#     --cap-add SYS_PTRACE --cap-add DAC_READ_SEARCH --cap-add SYS_RESOURCE \
#     -v dbtap-state:/var/lib/dbtap \
#     -v /etc/dbtap/dbtap.toml:/etc/dbtap/dbtap.toml:ro \
#     dbtap
# --network host: the capture sees the host's interfaces. --pid host and the eBPF
# capabilities: only for `source = "ebpf"` or `"auto"` (Unix sockets, TLS); with
# `source = "packet"` NET_RAW and NET_ADMIN suffice. Digest a capture with
#   docker run --rm -v $PWD:/data dbtap digest /data/traffic.pcap
#
# Stage 1 builds with the toolchain of the workspace's rust-version; clang builds the BPF
# program (without it the committed prebuilt object is used).
FROM rust:1.95-bookworm AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends clang libelf-dev zlib1g-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
ARG DBTAP_GIT_REVISION
ENV DBTAP_GIT_REVISION=${DBTAP_GIT_REVISION}
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p dbtap \
    && strip target/release/dbtap \
    && mkdir -p /out/man \
    && target/release/dbtap man --dir /out/man \
    && cp target/release/dbtap /out/dbtap

# Stage 2: the binary, its runtime libraries (libelf, zlib) and the service's config file.
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends libelf1 zlib1g ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/dbtap /usr/bin/dbtap
COPY --from=build /out/man/ /usr/share/man/man1/
COPY deploy/debian/dbtap.toml /etc/dbtap/dbtap.toml
# The file's listen = "127.0.0.1:9187" is the host's loopback with --network host; to serve
# other hosts mount a file with another address, or add `--listen 0.0.0.0:9187` to the command.
VOLUME /var/lib/dbtap
WORKDIR /var/lib/dbtap
EXPOSE 9187
ENTRYPOINT ["/usr/bin/dbtap"]
CMD ["live", "--config", "/etc/dbtap/dbtap.toml"]
