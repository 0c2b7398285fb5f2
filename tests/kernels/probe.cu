// Reports the architecture of the object that actually ran: __CUDA_ARCH__ is fixed when the
// PTX or cubin is generated for an arch, so a sm_80 object run on a sm_90 GPU reports 800.
extern "C" __global__ void cuda_arch(int* out) { out[0] = __CUDA_ARCH__; }
