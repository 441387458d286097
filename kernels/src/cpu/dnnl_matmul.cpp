#include "cpu/dnnl_matmul.hpp"

#include <map>
#include <vector>

#include "cpu/dnnl_common.hpp"
#include "troupe/kernels/error.hpp"

namespace troupe::cpu {

namespace {

using dnnl::memory;

memory::desc desc_of(const MatmulOperand& o) {
  return memory::desc({o.dims[0], o.dims[1], o.dims[2]}, o.type, {o.strides[0], o.strides[1], o.strides[2]});
}

// What identifies a primitive: every operand's type, dims and strides.
std::vector<std::int64_t> key_of(std::initializer_list<const MatmulOperand*> operands) {
  std::vector<std::int64_t> key;
  for (const MatmulOperand* o : operands) {
    if (!o) {
      key.push_back(-1);
      continue;
    }
    key.push_back(static_cast<std::int64_t>(o->type));
    key.insert(key.end(), o->dims, o->dims + 3);
    key.insert(key.end(), o->strides, o->strides + 3);
  }
  return key;
}

const char* type_name(memory::data_type t) {
  switch (t) {
    case memory::data_type::bf16: return "bf16";
    case memory::data_type::f16: return "f16";
    case memory::data_type::f32: return "f32";
    default: return "other";
  }
}

struct Built {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul primitive;
};

// The primitive for these operands and OpenMP threads, built once per calling thread: building one
// costs tens of microseconds, a tenth of a small product.
const Built& primitive_for(const MatmulOperand& a, const MatmulOperand& b, const MatmulOperand* bias,
                           const MatmulOperand& c, int threads) {
  thread_local std::map<std::vector<std::int64_t>, Built> built;
  constexpr std::size_t kMaxKept = 512;  // shapes of one model's steps; a dynamic-shape workload starts over
  std::vector<std::int64_t> key = key_of({&a, &b, bias, &c});
  key.push_back(threads);  // the scratchpad's size depends on it: a planned step must see the same one
  auto it = built.find(key);
  if (it != built.end()) return it->second;
  if (built.size() >= kMaxKept) built.clear();
  try {
    const dnnl::matmul::desc d = bias ? dnnl::matmul::desc(desc_of(a), desc_of(b), desc_of(*bias), desc_of(c))
                                      : dnnl::matmul::desc(desc_of(a), desc_of(b), desc_of(c));
    dnnl::matmul::primitive_desc pd(d, user_scratchpad_attributes(), cpu_engine());
    dnnl::matmul primitive(pd);
    return built.emplace(key, Built{pd, primitive}).first->second;
  } catch (const dnnl::error& e) {
    const dnnl_version_t* v = dnnl_version();
    fail(ErrorKind::unsupported, "matmul: oneDNN ", v->major, ".", v->minor, " has no ", type_name(a.type), " x ",
         type_name(b.type), " -> ", type_name(c.type), " product on this CPU (its widest instruction set: ",
         dnnl_isa_name(), ")", a.type == memory::data_type::f16 ? "; use bf16 (--amp-dtype bf16)" : "", " (", e.what(),
         ")");
  }
}

}  // namespace

void dnnl_matmul(const MatmulOperand& a, const MatmulOperand& b, const MatmulOperand* bias, const MatmulOperand& c) {
  // The thread count first: a primitive sizes its scratchpad for the threads it is built with.
  const int threads = limit_threads_here(static_cast<long long>(c.dims[0]) * c.dims[1] * c.dims[2] * a.dims[2]);
  const Built& p = primitive_for(a, b, bias, c, threads);
  dnnl::stream stream(cpu_engine());
  CallBuffers buffers;
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, memory(desc_of(a), cpu_engine(), a.data)},
                                       {DNNL_ARG_WEIGHTS, memory(desc_of(b), cpu_engine(), b.data)},
                                       {DNNL_ARG_DST, memory(desc_of(c), cpu_engine(), c.data)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, memory(desc_of(*bias), cpu_engine(), bias->data));
  execute_with_scratchpad(p.primitive, p.pd, std::move(args), stream, buffers);
  stream.wait();
}

bool dnnl_has_matmul(dnnl::memory::data_type type) {
  MatmulOperand a, b, c;
  a.type = b.type = type;
  a.dims[1] = a.dims[2] = b.dims[1] = b.dims[2] = c.dims[1] = c.dims[2] = 16;
  a.strides[1] = b.strides[1] = c.strides[1] = 16;
  a.strides[0] = b.strides[0] = c.strides[0] = 256;
  try {
    primitive_for(a, b, nullptr, c, limit_threads_here(0));
    return true;
  } catch (const Error&) {
    return false;
  }
}

const char* dnnl_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "amx";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_bf16";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx2: return "avx2";
    default: return "other";
  }
}

}  // namespace troupe::cpu
