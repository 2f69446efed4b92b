__kernel void axpy(__global const float* x, __global float* y, float a, int n) {
  uint i = __builtin_amdgcn_workgroup_id_x() * 64 + __builtin_amdgcn_workitem_id_x();
  if (i < (uint)n) y[i] = a * x[i] + y[i];
}
