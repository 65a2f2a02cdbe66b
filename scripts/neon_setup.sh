#!/bin/sh
# Setup for `make check-neon` on Debian (x86-64): a cross compiler for AArch64 and qemu-user, so that
# the NEON kernels' tests run under emulation on a machine without NEON.
#
#     sudo sh scripts/neon_setup.sh          (or as root; idempotent)
#
# Exits 0 with a message when it cannot install them (not Debian, not root, no package server): the
# check then skips itself, saying why.
if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1; then
  echo "neon_setup: aarch64-linux-gnu-gcc and qemu-aarch64 are installed"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "neon_setup: not installed (needs root and apt-get: gcc-aarch64-linux-gnu qemu-user)"
  exit 0
fi
if apt-get update >/dev/null 2>&1 &&
   DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null 2>&1; then
  echo "neon_setup: installed gcc-aarch64-linux-gnu and qemu-user"
else
  echo "neon_setup: apt-get could not install gcc-aarch64-linux-gnu qemu-user"
fi
exit 0
