#!/bin/sh
# dpkg -i of gpu-healthcheck and gpu-healthcheck-spank, Debian's own Slurm loading the plugin,
# then dpkg -r, in a throwaway root:  (tests/packaging/test_deb.py)
#
#   unshare -m --propagation private sh tests/packaging/spank_roundtrip.sh DEB SPANK_DEB WORKDIR
#
# The root is an overlay of this machine's own / (read only) under a tmpfs, as in
# tests/lib/deb_roundtrip.sh (which says why): dpkg checks the Depends against the Slurm really
# installed here, and every write (dpkg's database, the plugin directory, /etc/slurm) lands in
# the tmpfs.  Slurm is never started: `sbatch --help` loads plugstack.conf's plugins to list
# their options, and needs no slurmctld for that.  Prints "== STEP" headers and output; exits
# non-zero at the first failing step.
set -eu
. "$(dirname "$0")/../lib/throwaway_root.sh"
deb=$1 spank=$2 work=$3
ov=$work/ov
mkdir -p "$ov"
mount -t tmpfs -o mode=0755 tmpfs "$ov"
# Hide any gpu-healthcheck already on this machine (an install, a config, a plugin).
multiarch=$(gcc -print-multiarch)
throwaway_root "$ov" / etc/gpu-healthcheck var/lib/gpu-healthcheck usr/bin/gpu-healthcheck \
    usr/libexec/gpu-healthcheck usr/share/gpu-healthcheck "usr/lib/$multiarch/slurm-wlm/gpu_healthcheck.so" \
    etc/slurm/plugstack.conf.d/gpu-healthcheck.conf
t=$R/tmp/t
mkdir -p "$t"
cp "$deb" "$t/pkg.deb"
cp "$spank" "$t/spank.deb"
in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
# A gpu-healthcheck this machine's dpkg database knows: forgotten in the throwaway root only.
for pkg in gpu-healthcheck-spank gpu-healthcheck; do
    case $(in_root dpkg-query -W -f='${db:Status-Abbrev}' "$pkg" 2>/dev/null || true) in
        ""|un*) ;;
        *) in_root dpkg --purge "$pkg" >/dev/null ;;
    esac
done

echo "== INSTALL"
in_root dpkg -i /tmp/t/pkg.deb /tmp/t/spank.deb
echo "== FILES"
in_root dpkg -L gpu-healthcheck-spank
# slurm.conf for the commands only: no daemon reads it.  PluginDir is left to Slurm's default,
# where the package must have put the plugin.
conf() {
    printf 'ClusterName=t\nSlurmctldHost=localhost\nPlugStackConfig=%s\n' "$1" > "$t/slurm.conf"
}
sbatch_help() {
    echo "== SBATCH $1"
    in_root env SLURM_CONF=/tmp/t/slurm.conf sbatch --help > "$t/help" 2>&1 && rc=0 || rc=$?
    echo "rc=$rc"
    grep -e '--gpu-healthcheck' -e ': error:' "$t/help" || true
}
# As the package says to turn it on: its plugstack.conf.d line into Debian's include directory.
cp "$R/usr/share/doc/gpu-healthcheck-spank/gpu-healthcheck.conf" "$R/etc/slurm/plugstack.conf.d/"
conf /etc/slurm/plugstack.conf
sbatch_help "plugstack.conf.d"
# By its bare name, which Slurm looks up in its PluginDir.
echo "required gpu_healthcheck.so" > "$t/plugstack.conf"
conf /tmp/t/plugstack.conf
sbatch_help "bare name"
rm "$R/etc/slurm/plugstack.conf.d/gpu-healthcheck.conf"

echo "== REMOVE"
in_root dpkg -r gpu-healthcheck-spank gpu-healthcheck
[ -e "$R/usr/lib/$multiarch/slurm-wlm/gpu_healthcheck.so" ] && echo "plugin left" || echo "plugin gone"
sbatch_help "after remove"
echo "== DONE"
