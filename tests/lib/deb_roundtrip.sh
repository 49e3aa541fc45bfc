#!/bin/sh
# dpkg -i / run / dpkg -r / dpkg --purge of the .deb, in a throwaway root:  (tests/packaging/test_deb.py)
#
#   unshare -m --propagation private sh tests/lib/deb_roundtrip.sh DEB FAKEGPU_BUILD WORKDIR [rc]
#
# With "rc", the machine under the throwaway root is first given what a node that once had the
# package shows: installed, then removed but not purged (dpkg's "rc" state, its conffile and
# its dpkg bookkeeping left).  That is made in an overlay layer of its own, which then lies
# under the throwaway root as if it were this machine's own /, so the run below meets it just
# as it would meet such a host.
#
# Inside a private mount namespace, an overlay whose lower layer is this machine's own / (read
# only) and whose upper layer is a tmpfs becomes the root a chroot runs dpkg in.  So dpkg
# resolves Depends against the packages really installed here, maintainer scripts really run,
# and every write (dpkg's database, /usr/bin, /etc/gpu-healthcheck, /var/lib/gpu-healthcheck)
# lands in the tmpfs, which vanishes with the namespace: the host is never touched.  /run is a
# fresh tmpfs, so no systemd, journald or munge socket of the host is reachable, and the
# maintainer scripts see no running systemd.
#
# Prints "== STEP" headers, command output, and after each step the files the upper layer holds
# (what the steps changed), for the test to judge; exits non-zero at the first failing step.
set -eu
. "$(dirname "$0")/throwaway_root.sh"
deb=$1 fake=$2 work=$3 seed=${4:-}
ov=$work/ov
mkdir -p "$ov"
mount -t tmpfs -o mode=0755 tmpfs "$ov"
mkdir "$ov/seed"
host=/
if [ "$seed" = rc ]; then
    mkdir "$ov/seedwork" "$ov/seedroot"
    mount -t overlay overlay -o "lowerdir=/,upperdir=$ov/seed,workdir=$ov/seedwork" "$ov/seedroot"
    S=$ov/seedroot
    mount -t proc proc "$S/proc"
    mount -t tmpfs -o mode=0755 tmpfs "$S/run"
    mount -t tmpfs -o mode=1777 tmpfs "$S/tmp"
    cp "$deb" "$S/tmp/pkg.deb"
    echo "== SEED rc"
    chroot "$S" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin sh -c \
        'dpkg -i /tmp/pkg.deb >/dev/null && dpkg -r gpu-healthcheck >/dev/null &&
         dpkg-query -W -f="\${db:Status-Abbrev}\n" gpu-healthcheck && ls /etc/gpu-healthcheck'
    umount "$S/tmp" "$S/run" "$S/proc" "$S"
    host=$ov/seed:/
fi
# A layer of whiteouts over the host's own root hides any gpu-healthcheck already on this
# machine (a state directory, a config, an install): the test neither reads nor depends on it.
throwaway_root "$ov" "$host" etc/gpu-healthcheck var/lib/gpu-healthcheck usr/bin/gpu-healthcheck \
    usr/libexec/gpu-healthcheck usr/share/gpu-healthcheck usr/lib/python3/dist-packages/healthcheck

# What the test runs on the fake GPUs: the libraries, a scenario, a config whose kernel log,
# sysfs and scontrol are files in /tmp (state_dir stays the packaged default, in the overlay).
t=$R/tmp/t
mkdir -p "$t/fake" "$t/sys/bus/pci/devices"
cp "$deb" "$t/pkg.deb"
cp "$fake/libnvidia-ml.so.1" "$fake/libcuda.so.1" "$t/fake/"
printf 'gpus = 8\n' > "$t/healthy.scenario"
printf 'gpus = 8\ngpu.3.ecc.volatile.uncorrected = 2\n' > "$t/dbe.scenario"
: > "$t/kern.log"
cat > "$t/config.toml" <<EOF
kernel_log = "/tmp/t/kern.log"
sysfs_root = "/tmp/t/sys"
scontrol = "/tmp/t/no-scontrol"
journal = false
EOF
chmod 0644 "$t/config.toml"

in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "$@"; }
changes() {
    # Files (not the directories copied up around them) the steps so far left in the root.
    echo "== CHANGES $1"
    (cd "$ov/upper" && find . \( -type f -o -type l -o -type c \) -printf '%y /%P\n' | sort)
}
fake_env="LD_LIBRARY_PATH=/tmp/t/fake GPU_HEALTHCHECK_CONFIG=/tmp/t/config.toml"

echo "== PYNVML"
in_root /usr/bin/python3 -c 'import pynvml' >/dev/null 2>&1 && echo "host python3 has pynvml" || echo "host python3 lacks pynvml"

# Another `healthcheck` in the system Python, where an install of PyPI's (a Flask add-on,
# nothing to do with us) would put it: the package must neither overwrite it nor be shadowed
# by it.
decoy=/usr/lib/python3/dist-packages/healthcheck
mkdir -p "$R$decoy"
echo '"""Not gpu-healthcheck: stands for PyPI healthcheck."""' > "$R$decoy/__init__.py"

if ! in_root dpkg -s python3-psutil >/dev/null 2>&1; then
    # Not installed on this machine: fetch it into the overlay as apt would for a user.
    echo "== APT python3-psutil"
    in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-psutil >/dev/null 2>&1 ||
        { in_root apt-get update -q >/dev/null 2>&1 &&
          in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-psutil; }
fi
# A gpu-healthcheck this machine knows (installed, or removed but not purged: "rc", with its
# conffile's checksum in dpkg's database while the mask above hides the file) would make the
# install an upgrade that keeps the "deleted" conffile out.  Purge it from the throwaway root's
# database first, so the round trip starts from a machine that never had it; the host's own
# database is only ever read.
earlier=$(in_root dpkg-query -W -f='${db:Status-Abbrev}' gpu-healthcheck 2>/dev/null || true)
case $earlier in
    ""|un*) ;;
    *) echo "== EARLIER"
       echo "$earlier" | sed 's/ *$//'
       in_root dpkg --purge gpu-healthcheck >/dev/null ;;
esac
changes before

echo "== INSTALL"
in_root dpkg -i /tmp/t/pkg.deb
changes installed

echo "== VERSION"
in_root /usr/bin/gpu-healthcheck --version
# The launcher itself, run as its #! line runs it, with -v: which healthcheck and pynvml.py it
# imported (through the byte code postinst compiled, or from the source).
in_root env $fake_env FAKEGPU_SCENARIO=/tmp/t/healthy.scenario /usr/bin/python3 -s -v \
    /usr/bin/gpu-healthcheck --node --json 2>"$t/imports.log" >/dev/null || true
imported() {
    sed -n -e "s|^# .* matches \(.*/$1\)\$|\1|p" -e "s|^# code object from '\?\(.*/$1\)'\?\$|\1|p" \
        "$t/imports.log" | sort -u
}
echo "== HEALTHCHECK USED"
imported 'healthcheck/__init__\.py'
echo "== PYNVML USED"
imported 'pynvml\.py'
echo "== OTHER HEALTHCHECK"
# The system Python still finds the other healthcheck, as it was (-B: writes no byte code).
in_root /usr/bin/python3 -B -c 'import healthcheck; print(healthcheck.__file__, healthcheck.__doc__)'
echo "== MAN"
in_root man -w gpu-healthcheck
echo "== CHECK-CONFIG"
in_root /usr/bin/gpu-healthcheck --check-config | head -n 1
echo "== NODE healthy"
in_root env $fake_env FAKEGPU_SCENARIO=/tmp/t/healthy.scenario /usr/bin/gpu-healthcheck --node --json > "$t/healthy.json" && rc=0 || rc=$?
echo "rc=$rc"
cat "$t/healthy.json"; echo
echo "== NODE dbe"
in_root env $fake_env FAKEGPU_SCENARIO=/tmp/t/dbe.scenario /usr/bin/gpu-healthcheck --node --json > "$t/dbe.json" && rc=0 || rc=$?
echo "rc=$rc"
cat "$t/dbe.json"; echo
echo "== PROLOG no PATH"
# As slurmd runs it: no PATH, no arguments; the job's GPUs from Slurm's environment.
chroot "$R" /usr/bin/env -i $fake_env FAKEGPU_SCENARIO=/tmp/t/healthy.scenario SLURM_JOB_ID=7 \
    SLURMD_NODENAME=n1 SLURM_JOB_GPUS=0 /usr/libexec/gpu-healthcheck/gpu-healthcheck-prolog && rc=0 || rc=$?
echo "rc=$rc"
changes ran

echo "== REMOVE"
in_root dpkg -r gpu-healthcheck
changes removed
echo "== LEFT"
for p in /etc/gpu-healthcheck /var/lib/gpu-healthcheck /usr/libexec/gpu-healthcheck \
         /usr/share/gpu-healthcheck /usr/bin/gpu-healthcheck $decoy/__init__.py; do
    [ -e "$R$p" ] && echo "exists $p" || echo "absent $p"
done
echo "== PURGE"
in_root dpkg --purge gpu-healthcheck
changes purged
echo "== LEFT"
for p in /etc/gpu-healthcheck /var/lib/gpu-healthcheck; do
    [ -e "$R$p" ] && echo "exists $p" || echo "absent $p"
done
echo "== DONE"
