// CUDA matrix products, as src/cpu/matmul.cpp: c = op(a) op(b) over the broadcast batch dims, in
// f32 and f64 (f32 in f32 arithmetic: cuBLAS's default math mode takes no TF32 shortcut),
// and bf16 or f16 operands accumulating in f32, written in their dtype or as f32. cuBLAS reads each
// operand on its own strides where a matrix's rows or columns are dense (a transposed view needs
// no copy); a batch whose entries are evenly spaced runs as one strided-batched call. matmul_bias
// starts every row of c as the bias and accumulates onto it (beta = 1), as the CPU kernel does.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <map>
#include <type_traits>

#include "cuda/common.hpp"
#include "device_backend.hpp"
#include "matmul_layout.hpp"
#include "troupe/kernels/registry.hpp"

namespace troupe {

namespace {

using cuda::check_cuda;

void check_cublas(cublasStatus_t rc, const char* what) {
  TROUPE_CHECK(rc == CUBLAS_STATUS_SUCCESS, runtime, what, " failed: cuBLAS status ", static_cast<int>(rc));
}

// cuBLAS, opened at the first product on a GPU: linked, its libraries (over 600 MB) would be mapped
// into every process of a CUDA build, GPU or not, and a process under an address-space limit
// would not even start.
struct Cublas {
  cublasStatus_t (*create)(cublasHandle_t*) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t) = nullptr;
  cublasStatus_t (*gemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                         cudaDataType, int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int,
                         cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  cublasStatus_t (*gemm_strided_batched)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                         const void*, cudaDataType, int, long long, const void*, cudaDataType, int,
                                         long long, const void*, void*, cudaDataType, int, long long, int,
                                         cublasComputeType_t, cublasGemmAlgo_t) = nullptr;

  static const Cublas& get() {
    static const Cublas library = open();
    return library;
  }

 private:
  static Cublas open() {
    void* lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
    TROUPE_CHECK(lib, unsupported, "products on CUDA need cuBLAS, but libcublas.so.13 could not be loaded (", dlerror(),
                 "); install CUDA 13's cuBLAS or add its folder to LD_LIBRARY_PATH");
    Cublas c;
    const auto find = [lib](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      TROUPE_CHECK(fn, unsupported, "libcublas.so.13 has no ", name, "; install CUDA 13's cuBLAS");
    };
    find(c.create, "cublasCreate_v2");
    find(c.set_stream, "cublasSetStream_v2");
    find(c.gemm, "cublasGemmEx");
    find(c.gemm_strided_batched, "cublasGemmStridedBatchedEx");
    return c;
  }
};

// This thread's cuBLAS handle of the current device: a handle is not safe to share between threads
// that set its stream.
cublasHandle_t handle() {
  thread_local std::map<int, cublasHandle_t> handles;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  cublasHandle_t& h = handles[device];
  if (!h) check_cublas(Cublas::get().create(&h), "cublasCreate");
  check_cublas(Cublas::get().set_stream(h, cuda::launch_stream()), "cublasSetStream");
  return h;
}

// The common step of evenly spaced offsets (0 for one entry or a broadcast operand), or -1.
long long even_step(const std::vector<std::int64_t>& offs) {
  const long long step = offs.size() > 1 ? offs[1] - offs[0] : 0;
  for (std::size_t i = 0; i < offs.size(); ++i)
    if (offs[i] != offs[0] + static_cast<long long>(i) * step) return -1;
  return offs[0] == 0 ? step : -1;
}

cudaDataType_t data_type(DType t) {
  switch (t) {
    case DType::f32: return CUDA_R_32F;
    case DType::f64: return CUDA_R_64F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    default: fail(ErrorKind::dtype_mismatch, "matmul on CUDA takes f32, f64, bf16 or f16, got ", dtype_name(t));
  }
}

// c = op(a) op(b) + beta c. cuBLAS is column-major: the row-major c [m, n] is the column-major c^T,
// so it computes c^T = op(b)^T op(a)^T, where a row-major matrix read as column-major is already
// its transpose.
void products(Tensor a, Tensor b, bool trans_a, bool trans_b, double beta, const Tensor& c) {
  kernels::MatrixLayout la = kernels::matrix_layout(a), lb = kernels::matrix_layout(b);
  if (!la.ok) a = a.contiguous(), la = kernels::matrix_layout(a);
  if (!lb.ok) b = b.contiguous(), lb = kernels::matrix_layout(b);
  const bool ta = la.trans != trans_a, tb = lb.trans != trans_b;
  const long long m = c.size(-2), n = c.size(-1), k = trans_a ? a.size(-2) : a.size(-1);
  const Shape batch = kernels::batch_of(c);
  const auto ao = kernels::batch_offsets(a, batch), bo = kernels::batch_offsets(b, batch);
  if (m == 0 || n == 0 || ao.empty()) return;
  const bool f64 = c.dtype() == DType::f64;
  const double alpha_d = 1.0, beta_d = beta;
  const float alpha_f = 1.0f, beta_f = static_cast<float>(beta);
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : &alpha_f;
  const void* beta_p = f64 ? static_cast<const void*>(&beta_d) : &beta_f;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const cudaDataType_t operands = data_type(a.dtype()), result = data_type(c.dtype());
  const std::size_t esize = dtype_size(a.dtype()), csize = dtype_size(c.dtype());
  const auto* ap = static_cast<const char*>(a.raw_data());
  const auto* bp = static_cast<const char*>(b.raw_data());
  auto* cp = static_cast<char*>(c.raw_data());
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t h = handle();
  const long long sa = even_step(ao), sb = even_step(bo);
  if (sa >= 0 && sb >= 0) {
    check_cublas(Cublas::get().gemm_strided_batched(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                                            alpha, bp, operands, static_cast<int>(lb.ld), sb, ap, operands,
                                            static_cast<int>(la.ld), sa, beta_p, cp, result, static_cast<int>(n), m * n,
                                            static_cast<int>(ao.size()), compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmStridedBatchedEx");
    return;
  }
  for (std::size_t i = 0; i < ao.size(); ++i)
    check_cublas(Cublas::get().gemm(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), alpha,
                              bp + bo[i] * static_cast<long long>(esize), operands, static_cast<int>(lb.ld),
                              ap + ao[i] * static_cast<long long>(esize), operands, static_cast<int>(la.ld), beta_p,
                              cp + static_cast<long long>(i) * m * n * static_cast<long long>(csize), result,
                              static_cast<int>(n), compute, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
}

void matmul_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  products(in[0], in[1], attrs.get_int("trans_a") != 0, attrs.get_int("trans_b") != 0, 0.0, out[0]);
  cuda::finish_launch("matmul");
}

void matmul_bias_kernel(const std::vector<Tensor>& in, std::vector<Tensor>& out, const Attrs& attrs) {
  detail::copy_elements_on_device(out[0], in[2]);  // every row starts as the bias
  products(in[0], in[1], attrs.get_int("trans_a") != 0, attrs.get_int("trans_b") != 0, 1.0, out[0]);
  cuda::finish_launch("matmul_bias");
}

}  // namespace

TROUPE_REGISTER_KERNEL("matmul", cuda, f32, matmul_kernel);
TROUPE_REGISTER_KERNEL("matmul", cuda, f64, matmul_kernel);
TROUPE_REGISTER_KERNEL("matmul", cuda, bf16, matmul_kernel);
TROUPE_REGISTER_KERNEL("matmul", cuda, f16, matmul_kernel);
TROUPE_REGISTER_KERNEL("matmul_bias", cuda, f32, matmul_bias_kernel);
TROUPE_REGISTER_KERNEL("matmul_bias", cuda, f64, matmul_bias_kernel);
TROUPE_REGISTER_KERNEL("matmul_bias", cuda, bf16, matmul_bias_kernel);
TROUPE_REGISTER_KERNEL("matmul_bias", cuda, f16, matmul_bias_kernel);

}  // namespace troupe
