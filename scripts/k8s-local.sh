#!/usr/bin/env bash
# A real one-node Kubernetes (v1.20.2) on 127.0.0.1, built from Debian's packages alone, for
# Legate's Kubernetes tests. See docs/backends/kubernetes-local.md; the facts it rests on
# (what works on these machines and what fails unless handled) are the project's
# KUBERNETES-LOCAL notes.
#
#   scripts/k8s-local.sh up                     # build once (cached), start, print KUBECONFIG=... last
#   scripts/k8s-local.sh status                 # exit 0 only if the API server answers and the node is Ready
#   scripts/k8s-local.sh down                   # stop everything `up` started, remove the state
#   scripts/k8s-local.sh image NAME:TAG FILE... # an image of FILEs + their libraries, imported
#   scripts/k8s-local.sh image-node NAME:TAG DIR  # node + DIR at /opt/agent, imported
#   scripts/k8s-local.sh selftest               # the pod shape Legate's runtime uses, checked
#   scripts/k8s-local.sh build                  # only build the binaries into the cache
#
# LEGATE_K8S_CACHE  the built binaries and the downloaded source (default ~/.cache/legate-k8s),
#                   outside the clone like the cargo target; `down` keeps it.
# LEGATE_K8S_STATE  etcd, containerd, kubelet, PKI, kubeconfigs, logs and pids of the running
#                   cluster (default $LEGATE_K8S_CACHE/state); fresh on each `up`, removed by `down`.
# LEGATE_K8S_API_PORT  the API server's port on 127.0.0.1 (default 6443).
#
# Everything listens on 127.0.0.1 only; pods sit on a bridge (10.244.0.0/24, the host is
# 10.244.0.1) that is neither masqueraded nor forwarded, so they reach the node and nothing else.
# Needs root (containerd, runc, mounts). Only stdout's last line of `up` is meant for machines.
set -euo pipefail

K8S_VERSION=v1.20.2
# The commit v1.20.2 was tagged at (hack/lib/version.sh of the source).
K8S_COMMIT=faecb196815e248d3ecfb03c680a4507229c2a56
PAUSE_VERSION=3.4.1
# Tags as containerd's CRI plugin normalizes them (a bare name:tag gets docker.io/library/).
PAUSE_IMAGE="localhost/legate-k8s/pause:$PAUSE_VERSION"

CACHE="${LEGATE_K8S_CACHE:-$HOME/.cache/legate-k8s}"
STATE="${LEGATE_K8S_STATE:-$CACHE/state}"
BIN="$CACHE/bin-$K8S_VERSION"
API_PORT="${LEGATE_K8S_API_PORT:-6443}"
# Not the default 2379/2380, so that a distribution's etcd service (started by apt on machines
# with systemd) does not collide with ours.
ETCD_PORT=12379
ETCD_PEER_PORT=12380
BRIDGE=legatek8s0
POD_CIDR=10.244.0.0/24
SERVICE_CIDR=10.96.0.0/16
# The processes `up` starts, in start order; `down` stops them in reverse (kubelet first).
COMPONENTS=(etcd containerd kube-apiserver kube-controller-manager kube-scheduler kubelet)
K8S_BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
DEB_PACKAGES=(etcd-server etcd-client containerd runc containernetworking-plugins busybox-static
  iptables iproute2 conntrack socat openssl golang-1.19-go golang-github-modern-go-reflect2-dev
  gcc libc6-dev)
CNI_BIN_DIR=/usr/lib/cni
GO=/usr/lib/go-1.19/bin/go

case "$STATE" in
  /*) ;;
  *) echo "k8s-local: LEGATE_K8S_STATE must be an absolute path (got '$STATE')" >&2; exit 2 ;;
esac
[ "$STATE" != / ] || { echo "k8s-local: LEGATE_K8S_STATE cannot be /" >&2; exit 2; }
LOGS="$STATE/logs"
PIDS="$STATE/pids"
PKI="$STATE/pki"
KUBECONFIG_ADMIN="$STATE/admin.kubeconfig"
CONTAINERD_SOCK="$STATE/containerd/containerd.sock"
RUNC_ROOT="$STATE/containerd/runc"

log() { echo "k8s-local: $*" >&2; }
die() { log "error: $*"; exit 1; }
# kubectl and ctr bound to this cluster; their output goes where the caller sends it.
kc() { "$BIN/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }
ctr_k8s() { ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

need_root() { [ "$(id -u)" = 0 ] || die "must run as root (containerd, runc and mounts need it)"; }

# The node's name is what the API server dials the kubelet at (--kubelet-preferred-address-types
# =Hostname), so it must resolve to loopback: the machine's hostname when /etc/hosts maps it to
# 127.x, else "localhost".
node_name() {
  local h
  h=$(hostname)
  if getent ahostsv4 "$h" 2>/dev/null | awk '{ print $1 }' | grep -q '^127\.'; then
    echo "$h" | tr '[:upper:]' '[:lower:]'
  else
    echo localhost
  fi
}

# ---------------------------------------------------------------------------------------------
# Packages and build
# ---------------------------------------------------------------------------------------------

install_packages() {
  local missing=() p
  for p in "${DEB_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# The only complete server source in reach is bookworm's `kubernetes` source package
# (1.20.5+really1.20.2: the upstream tree with vendor/). A deb-src entry for the machine's own
# Debian mirror makes `apt-get source` find it.
fetch_source() {
  local dir="$CACHE/src"
  mkdir -p "$dir"
  if ls "$dir"/kubernetes_*really1.20.2.orig.tar.gz >/dev/null 2>&1; then return 0; fi
  local list=/etc/apt/sources.list.d/legate-k8s-src.sources mirror
  if [ ! -f "$list" ]; then
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ { print $2; exit }' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    mirror="${mirror:-http://deb.debian.org/debian}"
    log "adding a deb-src entry for $mirror bookworm ($list)"
    printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$mirror" >"$list"
    apt-get update -qq >&2
  fi
  log "downloading the kubernetes source package"
  (cd "$dir" && apt-get source --download-only kubernetes/bookworm >&2)
  ls "$dir"/kubernetes_*really1.20.2.orig.tar.gz >/dev/null 2>&1 || die "no kubernetes 1.20.2 source in $dir"
}

have_binaries() {
  local b
  for b in "${K8S_BINARIES[@]}" pause; do [ -x "$BIN/$b" ] || return 1; done
}

# Builds the five binaries (GOPATH mode, stripped, versioned) and the static pause into $BIN;
# skipped when they are there. The Go cache and the extracted tree are deleted afterwards.
build() {
  if have_binaries; then return 0; fi
  need_root
  install_packages
  fetch_source
  local work="$CACHE/build" start
  start=$(date +%s)
  rm -rf "$work" "$BIN.tmp"
  mkdir -p "$work/src/k8s.io" "$BIN.tmp"
  log "extracting the source into $work"
  tar -xzf "$CACHE"/src/kubernetes_*really1.20.2.orig.tar.gz -C "$work/src/k8s.io"
  mv "$work/src/k8s.io/kubernetes-1.20.2" "$work/src/k8s.io/kubernetes"
  local tree="$work/src/k8s.io/kubernetes"
  # 1. Module mode with -mod=vendor wants go.mod updated: build in GOPATH mode instead.
  export GOPATH="$work" GO111MODULE=off GOCACHE="$work/gocache" GOFLAGS="" GOTOOLCHAIN=local
  # 3. The vendored reflect2 1.0.1 breaks on Go >= 1.18: Debian's 1.0.2 replaces it.
  rm -rf "$tree/vendor/github.com/modern-go/reflect2"
  cp -rL /usr/share/gocode/src/github.com/modern-go/reflect2 "$tree/vendor/github.com/modern-go/reflect2"
  cd "$tree"
  # 2. The release tree lacks pkg/generated/openapi/zz_generated.openapi.go (kube-apiserver
  # needs it): build the vendored openapi-gen and run it over the packages that ask for it,
  # the way build/root/Makefile.generated_files does (its KUBE target).
  log "generating pkg/generated/openapi (openapi-gen)"
  nice -n 10 "$GO" build -o "$work/openapi-gen" k8s.io/kubernetes/vendor/k8s.io/kube-openapi/cmd/openapi-gen
  local dirs
  dirs=$(grep -rlE --include='*.go' '^// *\+k8s:openapi-gen=' pkg cmd plugin vendor/k8s.io/*/ 2>/dev/null |
    grep -v -e '_test\.go$' -e '^vendor/k8s.io/code-generator/' -e '^vendor/k8s.io/sample-apiserver/' |
    xargs -n1 dirname | LC_ALL=C sort -u | sed 's|^|k8s.io/kubernetes/|' | paste -sd, -)
  nice -n 10 "$work/openapi-gen" --logtostderr -i "$dirs" \
    -p k8s.io/kubernetes/pkg/generated/openapi -O zz_generated.openapi \
    -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r "$work/api-violations.report" \
    >"$work/openapi-gen.log" 2>&1 || { tail -20 "$work/openapi-gen.log" >&2; die "openapi-gen failed"; }
  [ -f pkg/generated/openapi/zz_generated.openapi.go ] || die "openapi-gen wrote nothing"
  # 4. Version flags must name the vendored paths: component-base's (what --version and the
  # kubelet report) and client-go's (what the API server's /version answers), as
  # hack/lib/version.sh sets both.
  local v ldflags="-s -w" date
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for v in k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
    ldflags+=" -X $v.gitVersion=$K8S_VERSION -X $v.gitMajor=1 -X $v.gitMinor=20"
    ldflags+=" -X $v.gitCommit=$K8S_COMMIT -X $v.gitTreeState=clean -X $v.buildDate=$date"
  done
  local pkgs=() b
  for b in "${K8S_BINARIES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  log "building ${K8S_BINARIES[*]} (go $("$GO" env GOVERSION), nice 10; several minutes on a cold machine)"
  nice -n 10 "$GO" build -ldflags "$ldflags" -o "$BIN.tmp/" "${pkgs[@]}"
  # The sandbox ("pause") image's binary: static, from the source's build/pause.
  gcc -Os -Wall -Werror -static -DVERSION="v$PAUSE_VERSION-legate" -o "$BIN.tmp/pause" build/pause/linux/pause.c
  "$BIN.tmp/kube-apiserver" --version >&2
  cd /
  rm -rf "$BIN"
  mv "$BIN.tmp" "$BIN"
  rm -rf "$work"
  log "built into $BIN in $(($(date +%s) - start)) s ($(du -sh "$BIN" | cut -f1))"
}

# ---------------------------------------------------------------------------------------------
# Images (docker-archive tars imported with ctr)
# ---------------------------------------------------------------------------------------------

# copy_into ROOT PATH: PATH's content (symlinks followed) at the same absolute path under ROOT.
copy_into() {
  local root="$1" path="$2"
  mkdir -p "$root$(dirname "$path")"
  # Not through a busybox applet's symlink of the same name (FILE /bin/sh replaces the applet).
  rm -f "$root$path"
  cp -L --preserve=mode "$path" "$root$path"
}

# libs_into ROOT FILE: every library ldd lists for FILE and the dynamic loader (not FILE).
libs_into() {
  local root="$1" file="$2" lib
  for lib in $(ldd "$file" 2>/dev/null | awk '/=> \// { print $3 } /^\t\// { print $1 }'); do
    [ -e "$root$lib" ] || copy_into "$root" "$lib"
  done
}

# copy_with_libs ROOT FILE: FILE plus every library ldd lists for it and the dynamic loader.
copy_with_libs() {
  copy_into "$1" "$2"
  # Static binaries make ldd fail ("not a dynamic executable"): nothing more to copy.
  libs_into "$1" "$2"
}

# The common skeleton: an agent user 65532, /tmp 1777, /workspace and /home/agent owned by the
# agent, and busybox-static as /bin/busybox with its applets as /bin/* symlinks (sh, cat, tar,
# sleep ...): a shell and tar help ship a workspace in and out and debug a pod.
image_skeleton() {
  local root="$1" applet
  mkdir -p "$root/etc" "$root/tmp" "$root/workspace" "$root/home/agent" "$root/bin" "$root/proc" \
    "$root/dev" "$root/sys" "$root/var/run"
  printf 'root:x:0:0:root:/root:/bin/sh\nagent:x:65532:65532:agent:/home/agent:/bin/sh\n' >"$root/etc/passwd"
  printf 'root:x:0:\nagent:x:65532:\n' >"$root/etc/group"
  chmod 1777 "$root/tmp"
  chown 65532:65532 "$root/workspace" "$root/home/agent"
  [ -x /bin/busybox ] || install_packages
  cp /bin/busybox "$root/bin/busybox"
  for applet in $(/bin/busybox --list); do
    [ -e "$root/bin/$applet" ] || [ -L "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
  done
}

# write_archive ROOT NAME:TAG OUT ENTRYPOINT-JSON CMD-JSON USER: a docker-archive tar (manifest.json,
# the config JSON, one layer tar) of ROOT.
write_archive() {
  local root="$1" ref="$2" out="$3" entrypoint="$4" cmd="$5" user="$6" dir layer_sha config config_sha
  dir=$(mktemp -d)
  tar --numeric-owner --sort=name --mtime=@0 -C "$root" -cf "$dir/layer.tar" .
  layer_sha=$(sha256sum "$dir/layer.tar" | cut -d' ' -f1)
  mkdir "$dir/$layer_sha"
  mv "$dir/layer.tar" "$dir/$layer_sha/layer.tar"
  config=$(printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":{"User":"%s","Env":["PATH=/usr/local/bin:/usr/bin:/bin","HOME=/home/agent"],"WorkingDir":"/workspace","Entrypoint":%s,"Cmd":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created":"1970-01-01T00:00:00Z","created_by":"scripts/k8s-local.sh"}]}' \
    "$user" "$entrypoint" "$cmd" "$layer_sha")
  config_sha=$(printf '%s' "$config" | sha256sum | cut -d' ' -f1)
  printf '%s' "$config" >"$dir/$config_sha.json"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$config_sha" "$ref" "$layer_sha" >"$dir/manifest.json"
  tar -C "$dir" -cf "$out" manifest.json "$config_sha.json" "$layer_sha"
  rm -rf "$dir"
}

# import_archive FILE: into containerd's k8s.io namespace (the CRI's); the same tag is replaced.
import_archive() {
  [ -S "$CONTAINERD_SOCK" ] || die "containerd is not running (scripts/k8s-local.sh up first)"
  ctr_k8s images import "$1" >&2
}

# image NAME:TAG FILE...: each FILE at its absolute path, with its libraries; runs as 65532.
cmd_image() {
  need_root
  [ $# -ge 2 ] || die "usage: image NAME:TAG FILE..."
  local ref="$1" root tmp f abs first=""
  shift
  [ -S "$CONTAINERD_SOCK" ] || die "containerd is not running (scripts/k8s-local.sh up first)"
  tmp=$(mktemp -d)
  root="$tmp/rootfs"
  image_skeleton "$root"
  for f in "$@"; do
    [ -f "$f" ] || die "no such file: $f"
    abs=$(cd "$(dirname "$f")" && pwd)/$(basename "$f")
    first="${first:-$abs}"
    copy_with_libs "$root" "$abs"
  done
  write_archive "$root" "$ref" "$tmp/image.tar" null "[\"$first\"]" 65532:65532
  import_archive "$tmp/image.tar"
  log "imported $ref ($(du -sh "$tmp/image.tar" | cut -f1)): $*"
  rm -rf "$tmp"
}

# image-node NAME:TAG DIR: the machine's node (+ libraries) and DIR at /opt/agent.
cmd_image_node() {
  need_root
  [ $# -eq 2 ] || die "usage: image-node NAME:TAG DIR"
  local ref="$1" src="$2" root tmp node
  [ -d "$src" ] || die "no such directory: $src"
  [ -S "$CONTAINERD_SOCK" ] || die "containerd is not running (scripts/k8s-local.sh up first)"
  node=$(command -v node) || die "node is not installed"
  node=$(readlink -f "$node")
  tmp=$(mktemp -d)
  root="$tmp/rootfs"
  image_skeleton "$root"
  copy_with_libs "$root" "$node"
  [ "$node" = /usr/bin/node ] || { mkdir -p "$root/usr/bin"; ln -sf "$node" "$root/usr/bin/node"; }
  mkdir -p "$root/opt/agent"
  cp -a "$src/." "$root/opt/agent/"
  # Native executables the adapter ships (Claude Code's own binary, ripgrep...) need their
  # libraries too: librt, libpthread... that node alone does not pull in.
  local exe
  while IFS= read -r -d '' exe; do
    if [ "$(head -c 4 "$exe" | od -An -c | tr -d ' ')" = '177ELF' ]; then
      libs_into "$root" "$exe"
    fi
  done < <(find "$src" -type f -perm -u+x -size +1k -print0)
  write_archive "$root" "$ref" "$tmp/image.tar" null '["/usr/bin/node"]' 65532:65532
  import_archive "$tmp/image.tar"
  log "imported $ref ($(du -sh "$tmp/image.tar" | cut -f1)): $node + $src at /opt/agent"
  rm -rf "$tmp"
}

import_pause_image() {
  local tmp
  tmp=$(mktemp -d)
  mkdir -p "$tmp/rootfs"
  cp "$BIN/pause" "$tmp/rootfs/pause"
  write_archive "$tmp/rootfs" "$PAUSE_IMAGE" "$tmp/pause.tar" '["/pause"]' null 65535:65535
  import_archive "$tmp/pause.tar"
  rm -rf "$tmp"
}

# ---------------------------------------------------------------------------------------------
# PKI and configuration
# ---------------------------------------------------------------------------------------------

# cert NAME CN O SAN: a key and a certificate signed by the cluster's CA (client and server use).
cert() {
  local name="$1" cn="$2" o="$3" san="$4" subj ext
  subj="/CN=$cn"
  [ -n "$o" ] && subj="/O=$o$subj"
  ext="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth"
  [ -n "$san" ] && ext+=$'\n'"subjectAltName=$san"
  openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -sha256 -extfile <(printf '%s\n' "$ext") -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr"
}

# kubeconfig FILE CERT-NAME: a self-contained kubeconfig (data embedded) for that identity.
kubeconfig() {
  local file="$1" name="$2"
  cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: legate-local
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $name
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$name.crt")
    client-key-data: $(base64 -w0 "$PKI/$name.key")
contexts:
- name: legate-local
  context:
    cluster: legate-local
    user: $name
    namespace: default
current-context: legate-local
EOF
  chmod 600 "$file"
}

make_pki() {
  local node="$1"
  mkdir -p "$PKI"
  chmod 700 "$PKI"
  openssl req -x509 -new -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" -days 3650 \
    -subj "/CN=legate-local-ca" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
  cert apiserver kube-apiserver "" \
    "DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,IP:127.0.0.1,IP:10.96.0.1"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters ""
  cert admin legate-admin system:masters ""
  cert controller-manager system:kube-controller-manager "" ""
  cert scheduler system:kube-scheduler "" ""
  cert kubelet "system:node:$node" system:nodes "DNS:$node,DNS:localhost,IP:127.0.0.1"
  # Service-account token signing keys (the controller manager signs, the API server verifies).
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
  openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  kubeconfig "$KUBECONFIG_ADMIN" admin
  kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
  kubeconfig "$STATE/scheduler.kubeconfig" scheduler
  kubeconfig "$STATE/kubelet.kubeconfig" kubelet
}

write_configs() {
  mkdir -p "$STATE/containerd" "$STATE/cni/net.d" "$STATE/cni/ipam" "$STATE/kubelet"
  # containerd: its own socket and directories under the state dir; cgroupfs (cgroups v1 here);
  # restrict_oom_score_adj because root lacks CAP_SYS_RESOURCE in these VMs (else runc fails
  # with "can't get final child's PID from pipe: EOF"); our pause image as the sandbox; no pulls.
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$CONTAINERD_SOCK"
[ttrpc]
  address = "$CONTAINERD_SOCK.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "$STATE/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$RUNC_ROOT"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$STATE/cni/net.d"
EOF
  # The pod network: a bridge with the host as gateway (10.244.0.1: how a pod reaches a proxy
  # on the node), no masquerade; forwarding off the bridge is dropped (see start_network).
  cat >"$STATE/cni/net.d/10-legate.conflist" <<EOF
{
  "cniVersion": "0.4.0",
  "name": "legate-local",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$POD_CIDR" }]],
        "dataDir": "$STATE/cni/ipam"
      }
    }
  ]
}
EOF
  # The kubelet: loopback only, webhook authn/authz against the API server, cgroupfs, no image
  # garbage collection (imported images cannot be pulled back) and eviction thresholds that a
  # busy build disk does not trip.
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
cgroupDriver: cgroupfs
failSwapOn: false
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: $PKI/ca.crt
authorization:
  mode: Webhook
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
serializeImagePulls: false
volumePluginDir: $STATE/kubelet/volume-plugins
EOF
}

# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------

# spawn NAME CMD...: started in its own session, detached from the script's stdio (so that a
# caller reading `up`'s stdout sees EOF), logged to $LOGS/NAME.log, pid in $PIDS/NAME.pid.
spawn() {
  local name="$1"
  shift
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
  echo $! >"$PIDS/$name.pid"
}

pid_of() { [ -f "$PIDS/$1.pid" ] && cat "$PIDS/$1.pid"; }
# ours PID NAME: PID runs the program NAME (not a process that reused a stale pid).
ours() {
  local argv0
  argv0=$(tr '\0' '\n' <"/proc/$1/cmdline" 2>/dev/null | head -n 1) || return 1
  [ "$(basename "$argv0")" = "$2" ]
}
alive() {
  local pid
  pid=$(pid_of "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && ours "$pid" "$1"
}

# wait_for SECONDS WHAT COMPONENT CMD...: poll CMD until it succeeds; fail early with the log's
# tail when COMPONENT has died.
wait_for() {
  local secs="$1" what="$2" comp="$3" i
  shift 3
  for ((i = 0; i < secs * 2; i++)); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    if [ -n "$comp" ] && ! alive "$comp"; then
      tail -25 "$LOGS/$comp.log" >&2 || true
      die "$comp exited while waiting for $what (log: $LOGS/$comp.log)"
    fi
    sleep 0.5
  done
  [ -n "$comp" ] && tail -25 "$LOGS/$comp.log" >&2
  die "timed out after ${secs}s waiting for $what"
}

node_ready() {
  [ "$(kc get node "$(node_name)" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

start_network() {
  # Pods must reach the node (10.244.0.1) and nothing past it: the bridge plugin turns IPv4
  # forwarding on for its gateway, so drop whatever would be forwarded into or out of the bridge.
  cat /proc/sys/net/ipv4/ip_forward >"$STATE/ip_forward.before"
  iptables -C FORWARD -i "$BRIDGE" -j DROP 2>/dev/null || iptables -I FORWARD -i "$BRIDGE" -j DROP
  iptables -C FORWARD -o "$BRIDGE" -j DROP 2>/dev/null || iptables -I FORWARD -o "$BRIDGE" -j DROP
}

cmd_up() {
  need_root
  if cmd_status >/dev/null 2>&1; then
    log "already running and healthy ($STATE)"
    echo "KUBECONFIG=$KUBECONFIG_ADMIN"
    return 0
  fi
  local start node
  start=$(date +%s)
  install_packages
  build
  # Whatever a previous, half-failed `up` left behind goes first: each `up` starts fresh.
  [ -d "$STATE" ] && cmd_down
  node=$(node_name)
  mkdir -p "$STATE" "$LOGS" "$PIDS"
  # `down` removes only a directory that carries this mark.
  echo "state of scripts/k8s-local.sh; removed by its down" >"$STATE/.legate-k8s-state"
  make_pki "$node"
  write_configs
  start_network

  log "starting etcd"
  spawn etcd etcd --name legate-local --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "legate-local=http://127.0.0.1:$ETCD_PEER_PORT" \
    --snapshot-count 10000 --log-level warn
  log "starting containerd"
  spawn containerd containerd --config "$STATE/containerd/config.toml"
  wait_for 60 "etcd" etcd etcdctl --endpoints "http://127.0.0.1:$ETCD_PORT" endpoint health
  wait_for 60 "containerd" containerd ctr --address "$CONTAINERD_SOCK" version
  import_pause_image

  log "starting kube-apiserver on https://127.0.0.1:$API_PORT"
  spawn kube-apiserver "$BIN/kube-apiserver" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --client-ca-file="$PKI/ca.crt" --tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" \
    --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority="$PKI/ca.crt" \
    --kubelet-preferred-address-types=Hostname \
    --endpoint-reconciler-type=none \
    --service-cluster-ip-range="$SERVICE_CIDR" \
    --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --authorization-mode=Node,RBAC \
    --enable-admission-plugins=NamespaceLifecycle,LimitRanger,ServiceAccount,NodeRestriction,ResourceQuota \
    --allow-privileged=false --profiling=false --event-ttl=1h
  wait_for 120 "the API server (/readyz)" kube-apiserver kc get --raw=/readyz

  log "starting kube-controller-manager and kube-scheduler"
  # The serviceaccount controller creates `default` in each namespace (pods are admitted
  # only then); the token controller signs with sa.key.
  spawn kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig="$STATE/controller-manager.kubeconfig" \
    --authentication-kubeconfig="$STATE/controller-manager.kubeconfig" \
    --authorization-kubeconfig="$STATE/controller-manager.kubeconfig" \
    --bind-address=127.0.0.1 --port=0 --leader-elect=false \
    --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
    --use-service-account-credentials=true \
    --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
    --service-cluster-ip-range="$SERVICE_CIDR" --allocate-node-cidrs=false \
    --controllers='*,-nodeipam,-cloud-node-lifecycle,-route,-service'
  spawn kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig="$STATE/scheduler.kubeconfig" \
    --authentication-kubeconfig="$STATE/scheduler.kubeconfig" \
    --authorization-kubeconfig="$STATE/scheduler.kubeconfig" \
    --bind-address=127.0.0.1 --port=0 --leader-elect=false

  log "starting the kubelet (node $node)"
  spawn kubelet "$BIN/kubelet" \
    --config="$STATE/kubelet/config.yaml" --kubeconfig="$STATE/kubelet.kubeconfig" \
    --root-dir="$STATE/kubelet" --cert-dir="$STATE/kubelet/pki" \
    --hostname-override="$node" \
    --container-runtime=remote --container-runtime-endpoint="unix://$CONTAINERD_SOCK" \
    --pod-infra-container-image="$PAUSE_IMAGE" \
    --register-node=true
  wait_for 120 "node $node Ready" kubelet node_ready
  wait_for 60 "the default ServiceAccount" kube-controller-manager kc -n default get serviceaccount default
  log "up in $(($(date +%s) - start)) s; logs in $LOGS"
  echo "KUBECONFIG=$KUBECONFIG_ADMIN"
}

# stop NAME: TERM, up to 15 s, then KILL.
stop() {
  local name="$1" pid i
  pid=$(pid_of "$name" 2>/dev/null) || return 0
  rm -f "$PIDS/$name.pid"
  [ -n "$pid" ] && ours "$pid" "$name" || return 0
  log "stopping $name ($pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 30; i++)); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.5
  done
  kill -KILL "$pid" 2>/dev/null || true
}

cmd_down() {
  need_root
  local i name pid mnt ns
  # The kubelet first, so that it does not restart what is being stopped.
  stop kubelet
  # The pods' containers: every runc container of the k8s.io namespace under our runc root,
  # then the shims that served them (those bound to our containerd socket).
  if [ -d "$RUNC_ROOT/k8s.io" ]; then
    for name in $(runc --root "$RUNC_ROOT/k8s.io" list -q 2>/dev/null); do
      runc --root "$RUNC_ROOT/k8s.io" kill "$name" KILL 2>/dev/null || true
      runc --root "$RUNC_ROOT/k8s.io" delete --force "$name" 2>/dev/null || true
    done
  fi
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    [ "${COMPONENTS[i]}" = kubelet ] || stop "${COMPONENTS[i]}"
  done
  # The pods' network namespaces (containerd keeps them in /run/netns as cni-*): those whose
  # addresses are on our pod range.
  for ns in /run/netns/cni-*; do
    [ -e "$ns" ] || continue
    ns=$(basename "$ns")
    if ip netns exec "$ns" ip -4 -o addr 2>/dev/null | grep -q ' 10\.244\.0\.'; then
      ip netns delete "$ns" 2>/dev/null || true
    fi
  done
  # Whatever the kubelet and containerd mounted under the state dir (deepest first).
  if [ -n "$STATE" ] && [ -d "$STATE" ]; then
    awk -v s="$STATE" 'index($2, s) == 1 { print $2 }' /proc/mounts | sort -r | while read -r mnt; do
      umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
    done
  fi
  ip link delete "$BRIDGE" 2>/dev/null || true
  while iptables -D FORWARD -i "$BRIDGE" -j DROP 2>/dev/null; do :; done
  while iptables -D FORWARD -o "$BRIDGE" -j DROP 2>/dev/null; do :; done
  if [ -f "$STATE/ip_forward.before" ]; then
    cat "$STATE/ip_forward.before" >/proc/sys/net/ipv4/ip_forward 2>/dev/null || true
  fi
  # The kubelet's (now empty) pod cgroups.
  find /sys/fs/cgroup/*/kubepods -depth -type d -exec rmdir {} \; 2>/dev/null || true
  if [ -f "$STATE/.legate-k8s-state" ]; then
    rm -rf "$STATE" 2>/dev/null || { sleep 1; rm -rf "$STATE"; }
  elif [ -d "$STATE" ]; then
    log "not removing $STATE: it lacks the mark .legate-k8s-state that up writes"
  fi
  log "down; binaries kept in $BIN"
}

cmd_status() {
  local name rc=0 node
  node=$(node_name)
  for name in "${COMPONENTS[@]}"; do
    if alive "$name"; then
      echo "$name: running (pid $(pid_of "$name"))"
    else
      echo "$name: not running"
    fi
  done
  if [ -f "$KUBECONFIG_ADMIN" ] && [ -x "$BIN/kubectl" ] && kc get --raw=/readyz >/dev/null 2>&1; then
    echo "api server: ready at https://127.0.0.1:$API_PORT"
  else
    echo "api server: not answering"
    rc=1
  fi
  if [ $rc = 0 ] && node_ready; then
    echo "node $node: Ready"
  else
    echo "node $node: not Ready"
    rc=1
  fi
  [ $rc = 0 ] && echo "KUBECONFIG=$KUBECONFIG_ADMIN"
  return $rc
}

# ---------------------------------------------------------------------------------------------
# selftest: the pod shape of Legate's Kubernetes runtime, on this cluster
# ---------------------------------------------------------------------------------------------

# selftest_pod NAME: the pod spec the runtime uses (confinement, volumes, limits, no pulls).
selftest_pod() {
  cat <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: $1
  namespace: legate-selftest
  labels: { app.kubernetes.io/managed-by: legate, legate.dev/selftest: "1" }
spec:
  automountServiceAccountToken: false
  restartPolicy: Never
  activeDeadlineSeconds: 600
  terminationGracePeriodSeconds: 2
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    fsGroup: 65532
    seccompProfile: { type: RuntimeDefault }
  containers:
  - name: agent
    image: legate-selftest:1
    imagePullPolicy: Never
    command: ["/bin/sleep", "3600"]
    securityContext:
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: { drop: ["ALL"] }
      seccompProfile: { type: RuntimeDefault }
    resources:
      requests: { cpu: 50m, memory: 32Mi }
      limits: { cpu: 500m, memory: 128Mi }
    volumeMounts:
    - { name: workspace, mountPath: /workspace }
    - { name: home, mountPath: /home/agent }
    - { name: tmp, mountPath: /tmp }
  volumes:
  - { name: workspace, emptyDir: {} }
  - { name: home, emptyDir: {} }
  - { name: tmp, emptyDir: { medium: "", sizeLimit: 64Mi } }
EOF
}

# quota_refused OUTPUT: kubectl's words for a 403 from the ResourceQuota admission.
quota_refused() { [[ "$1" == *" 403 Forbidden"* && "$1" == *"exceeded quota"* ]]; }

cmd_selftest() {
  need_root
  cmd_status >/dev/null || die "the cluster is not up (scripts/k8s-local.sh up)"
  local ns=legate-selftest tmp out fails=0
  tmp=$(mktemp -d)
  check() { # check DESCRIPTION CMD...
    local what="$1"
    shift
    if "$@"; then log "ok: $what"; else log "FAILED: $what"; fails=$((fails + 1)); fi
  }
  cmd_image legate-selftest:1 /bin/busybox
  kc delete namespace "$ns" --ignore-not-found --wait=true >/dev/null
  kc create namespace "$ns" >/dev/null
  wait_for 30 "the default ServiceAccount in $ns" "" kc -n "$ns" get serviceaccount default
  selftest_pod agent-1 | kc apply -f - >/dev/null
  kc -n "$ns" wait --for=condition=Ready pod/agent-1 --timeout=120s >&2 ||
    { kc -n "$ns" describe pod agent-1 >&2; die "the selftest pod did not become Ready"; }
  check "the pod runs as 65532:65532" test "$(kc -n "$ns" exec agent-1 -- id -u):$(kc -n "$ns" exec agent-1 -- id -g)" = 65532:65532
  check "exec -i round-trips stdin to stdout (text)" \
    test "$(printf 'hello legate\n' | kc -n "$ns" exec -i agent-1 -- cat)" = "hello legate"
  head -c 1048576 /dev/urandom >"$tmp/in"
  kc -n "$ns" exec -i agent-1 -- cat <"$tmp/in" >"$tmp/out"
  check "exec -i round-trips 1 MiB of binary" cmp -s "$tmp/in" "$tmp/out"
  check "no service-account token is mounted" \
    kc -n "$ns" exec agent-1 -- sh -c '! test -e /var/run/secrets/kubernetes.io/serviceaccount'
  check "a write to / fails" kc -n "$ns" exec agent-1 -- sh -c '! (echo x >/probe) 2>/dev/null'
  check "a write to /workspace works" kc -n "$ns" exec agent-1 -- sh -c 'echo x >/workspace/probe && test -s /workspace/probe'
  check "a write to /home/agent and /tmp works" kc -n "$ns" exec agent-1 -- sh -c 'echo x >/home/agent/p && echo x >/tmp/p'
  out=$(kc -n "$ns" exec agent-1 -- cat /proc/1/status)
  check "seccomp filter active (Seccomp: 2)" grep -qE '^Seccomp:[[:space:]]+2' <<<"$out"
  check "no_new_privs set" grep -qE '^NoNewPrivs:[[:space:]]+1' <<<"$out"
  check "no bounding capabilities" grep -qE '^CapBnd:[[:space:]]+0+$' <<<"$out"
  check "no effective capabilities" grep -qE '^CapEff:[[:space:]]+0+$' <<<"$out"
  check "memory limit applied (128Mi)" test "$(kc -n "$ns" exec agent-1 -- cat /sys/fs/cgroup/memory/memory.limit_in_bytes)" = 134217728
  # Quota: with pods: 1 used by agent-1, a second pod is refused with 403 "exceeded quota".
  kc -n "$ns" create quota legate-pods --hard=pods=1 >/dev/null
  wait_for 30 "the quota's status" "" sh -c "'$BIN/kubectl' --kubeconfig '$KUBECONFIG_ADMIN' -n $ns get quota legate-pods -o jsonpath='{.status.used.pods}' | grep -qx 1"
  out=$(selftest_pod agent-2 | kc create -v=6 -f - 2>&1 || true)
  log "second pod under the quota: $(grep -E 'POST .*/pods|Error from server' <<<"$out" | sed 's/^.*\] //')"
  check "a 2nd pod is refused: 403 Forbidden, exceeded quota" \
    quota_refused "$out"
  kc delete namespace "$ns" --wait=true --timeout=120s >/dev/null
  check "the namespace is gone" sh -c "! '$BIN/kubectl' --kubeconfig '$KUBECONFIG_ADMIN' get namespace $ns >/dev/null 2>&1"
  rm -rf "$tmp"
  if [ $fails -gt 0 ]; then die "selftest: $fails check(s) failed"; fi
  log "selftest: all checks passed"
}

case "${1:-}" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  build) need_root; install_packages; build; log "binaries in $BIN" ;;
  image) shift; cmd_image "$@" ;;
  image-node) shift; cmd_image_node "$@" ;;
  selftest) cmd_selftest ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
