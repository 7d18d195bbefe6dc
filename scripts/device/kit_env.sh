# Sourced (bash) with KIT set to an unpacked kit (scripts/device/pack.sh): puts the kit's Open MPI
# on PATH, its libraries on LD_LIBRARY_PATH and relocates Debian's Open MPI 4.1 (prefix /usr) to
# KIT/root/usr through OPAL_PREFIX (Open MPI's relocation variable, "Installing Open MPI in a
# non-default location", Open MPI 4.1 FAQ); PMIx does not follow OPAL_PREFIX, so its component
# directory is named explicitly. The MCA selections are those of Debian's
# /etc/openmpi/openmpi-mca-params.conf (sysconfdir /etc/openmpi is not under the prefix, so the
# file is not read from the kit): no UCX, OFI or openib transports.
: "${KIT:?kit_env.sh: set KIT to the unpacked kit directory}"
root=$KIT/root
export OPAL_PREFIX=$root/usr
export PATH=$KIT/bin:$root/usr/bin:$PATH
export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu/openmpi/lib:$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PMIX_MCA_mca_base_component_path=$root/usr/lib/x86_64-linux-gnu/pmix2/lib/pmix
export PMIX_INSTALL_PREFIX=$root/usr
export OMPI_MCA_btl_base_warn_component_unused=0
export OMPI_MCA_mtl=^ofi
export OMPI_MCA_btl=^uct,openib,ofi
export OMPI_MCA_pml=^ucx
export OMPI_MCA_osc=^ucx,pt2pt
# The device runs commands as root: mpirun refuses that unless told (mpirun(1), 4.1).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset root
