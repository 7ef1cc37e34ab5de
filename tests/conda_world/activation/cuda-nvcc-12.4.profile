# bin/nvcc.profile of the world's cuda-nvcc-tools 12.4.131: the profile NVIDIA's CUDA 12.4 installer
# writes (paths relative to nvcc's folder, the conda layout: nvvm/, targets/x86_64-linux/), in place of
# Debian's bin/nvcc.profile, an absolute link to /etc/nvcc.profile whose paths are /usr/lib/... .
TOP              = $(_HERE_)/..

NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice

LD_LIBRARY_PATH += $(TOP)/lib:
PATH            += $(TOP)/nvvm/bin:$(_HERE_):

INCLUDES        +=  "-I$(TOP)/$(_TARGET_DIR_)/include" $(_SPACE_)

LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)/stubs" "-L$(TOP)/$(_TARGET_DIR_)/lib$(_TARGET_SIZE_)"

CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
