# Sourced by tests/lib/deb_roundtrip.sh and tests/packaging/spank_roundtrip.sh (sh, set -eu, in a
# private mount namespace):
#
#   throwaway_root OV LOWER PATH...
#
# mounts OV/root: an overlay whose lower layers are LOWER (":"-separated, top first; "/" is this
# machine's own root, read only) under a layer of whiteouts hiding each PATH (relative to /),
# whose upper layer is OV/upper (OV: a tmpfs the caller mounted); with /proc, the host's /dev,
# and a fresh /run and /tmp.  Every write in it lands in OV/upper.  Sets R to the root.
throwaway_root() {
    _ov=$1 _lower=$2
    shift 2
    mkdir "$_ov/upper" "$_ov/work" "$_ov/root" "$_ov/mask"
    for _p in "$@"; do
        mkdir -p "$_ov/mask/$(dirname "$_p")"
        mknod "$_ov/mask/$_p" c 0 0
    done
    mount -t overlay overlay -o "lowerdir=$_ov/mask:$_lower,upperdir=$_ov/upper,workdir=$_ov/work" "$_ov/root"
    R=$_ov/root
    mount -t proc proc "$R/proc"
    mount --rbind /dev "$R/dev"
    mount -t tmpfs -o mode=0755 tmpfs "$R/run"
    mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"
}
