#!/bin/sh
# Installs an MPI (Debian's OpenMPI: openmpi-bin for mpirun, libopenmpi-dev for mpicc) for `make mpi` and
# `make check-mpi` (docs/mpi.md). Does nothing when mpicc and mpirun are already there; when it cannot
# install (not root, no apt-get, no network), says why and exits 0: check-mpi then skips itself, saying so.
if command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1; then
  echo "mpi_setup: mpicc and mpirun are installed ($(mpirun --version 2>&1 | head -n 1))"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "mpi_setup: no apt-get here: install an MPI by hand (OpenMPI or MPICH: mpicc and mpirun)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "mpi_setup: not root: run 'apt-get install openmpi-bin libopenmpi-dev' as root (or with sudo)"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
if ! apt-get update >/dev/null 2>&1 || ! apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev >/dev/null 2>&1; then
  echo "mpi_setup: apt-get could not install openmpi-bin libopenmpi-dev (offline? run it by hand to see why)"
  exit 0
fi
echo "mpi_setup: installed $(mpirun --version 2>&1 | head -n 1)"
