#!/usr/bin/env bash
# README's two commands on a stock Debian image built here from Debian's own packages, not on this
# machine's prepared Python: debootstrap a minbase bookworm (no Python, no compiler, no MPI), clone
# this repository into it, and run, as root inside a chroot,
#     bash scripts/demo.sh && bash scripts/test.sh
# then, with --as-user, the test command again as a user without root (the host tests skipped).
#
#   sudo bash bench/clean_image.sh IMAGE_DIR [--as-user] [--quick]
#
# IMAGE_DIR is made if missing (about 300 MB) and reused otherwise; delete it for a stock start.
# --quick runs `scripts/test.sh --quick` instead of the whole suite. AS_USER_ARGS: pytest arguments
# for the user's run (e.g. -m "slurm or multihost": only the tests that need root, all skipped).
# LOCAL_WHEELS=DIR (default /opt/wheels where it exists) is bound into the image and named as pip's
# find-links: setup.sh's "a local wheel where there is one". Without it setup.sh takes torch from
# the CPU wheel index. ROOT_COMMAND replaces the root run's command, and REUSE_CLONE=1 keeps the
# image's clone and its .venv from the run before (both to look into one test there).
# The log goes to stdout; bench/results/clean-image-*.log keeps one.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
image=${1:?usage: bench/clean_image.sh IMAGE_DIR [--as-user] [--quick]}
shift
as_user=0
quick=""
for arg in "$@"; do
  case "$arg" in
    --as-user) as_user=1 ;;
    --quick) quick="--quick" ;;
    *) echo "clean_image: unknown option $arg (expected --as-user or --quick)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "clean_image: needs root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -q debootstrap >/dev/null

if [ ! -e "$image/etc/debian_version" ]; then
  echo "== debootstrap: minbase bookworm into $image"
  debootstrap --variant=minbase bookworm "$image" http://deb.debian.org/debian >/dev/null
fi
echo "== image: Debian $(cat "$image/etc/debian_version"), python3 $(chroot "$image" sh -c 'command -v python3 || echo absent')"

mounted=()
cleanup() {
  local i
  # what the run mounted inside (ip netns's /run/netns) first, then ours in reverse order
  grep -o " $image/[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT
bind() {  # bind SRC DEST: recursive bind, unmounted on exit
  mkdir -p "$2"
  mount --rbind "$1" "$2"
  mount --make-rslave "$2"
  mounted+=("$2")
}
# The image's root a mount point of its own, as / is on any machine (ip netns, which the emulated
# hosts use, remounts / as a slave and fails on a plain folder).
mount --bind "$image" "$image"
mounted+=("$image")
mount -t proc proc "$image/proc"
mounted+=("$image/proc")
bind /sys "$image/sys"
bind /dev "$image/dev"
# What any installed machine has and debootstrap leaves out: its own name resolving (Slurm looks
# its host up), and a resolver.
cp /etc/resolv.conf "$image/etc/resolv.conf"
hostname > "$image/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$(hostname)" > "$image/etc/hosts"
# This workplace reaches PyPI through a TLS-intercepting proxy: its CA goes in as pip's PIP_CERT,
# as at any site behind such a proxy (nothing else of the host's set-up enters the image).
cp /etc/ssl/certs/ca-certificates.crt "$image/opt/site-ca.crt"
pip_env=(PIP_CERT=/opt/site-ca.crt)
wheels=${LOCAL_WHEELS:-}
[ -z "$wheels" ] && [ -d /opt/wheels ] && wheels=/opt/wheels
if [ -n "$wheels" ]; then
  bind "$wheels" "$image/opt/local-wheels"
  pip_env+=(PIP_FIND_LINKS=/opt/local-wheels)
  echo "== local wheels: $wheels ($(ls "$wheels" | tr '\n' ' '))"
fi

clone() {  # clone DEST: a fresh clone of this repository's HEAD
  rm -rf "$1"
  git clone -q "$here" "$1"
  echo "== clone: $(git -C "$1" log -1 --format='%h %s' | cut -c1-100)"
}
in_image() {  # in_image USER DIR COMMAND: a clean environment, as a login would have it
  chroot "$image" env -i HOME="$( [ "$1" = root ] && echo /root || echo "/home/$1")" \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    "${pip_env[@]}" setpriv --reuid="$1" --regid="$1" --init-groups \
    bash -c "cd $2 && $3"
}

if [ -n "${REUSE_CLONE:-}" ] && [ -d "$image/root/distgnn/.venv" ]; then
  echo "== clone: reused (REUSE_CLONE)"
else
  clone "$image/root/distgnn"
fi
start=$(date +%s)
root_command=${ROOT_COMMAND:-"bash scripts/demo.sh && bash scripts/test.sh $quick"}
echo "== as root: $root_command"
in_image root /root/distgnn "$root_command"
echo "== as root: rc 0 in $(( $(date +%s) - start )) s"

if (( as_user )); then
  chroot "$image" id tester >/dev/null 2>&1 || chroot "$image" useradd -m tester
  clone "$image/home/tester/distgnn"
  chroot "$image" chown -R tester:tester /home/tester/distgnn
  start=$(date +%s)
  echo "== as tester (no root, no sudo): bash scripts/test.sh $quick ${AS_USER_ARGS:-}"
  in_image tester /home/tester/distgnn "bash scripts/test.sh $quick ${AS_USER_ARGS:-}"
  echo "== as tester: rc 0 in $(( $(date +%s) - start )) s"
fi
