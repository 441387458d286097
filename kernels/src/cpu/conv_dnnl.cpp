#include "cpu/conv_dnnl.hpp"

#include "cpu/dnnl_common.hpp"

namespace troupe::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Descs {
  memory::desc src, weights, bias, dst;       // the tensors' own layouts: NCHW or nChw16c, OIHW
  memory::desc any_src, any_weights, any_dst;  // what oneDNN may pick
  memory::dims strides, pad_l, pad_r;
};

// The element types of one call: the input, the weights and the output (the bias: the output's).
struct Types {
  dt src, weights, dst;
};

Descs descs(const kernels::ConvGeometry& s, const Types& t) {
  Descs d;
  const memory::dims src{s.n, s.c, s.h, s.w}, wei{s.o, s.c, s.kh, s.kw}, dst{s.n, s.o, s.ho, s.wo};
  d.src = memory::desc(src, t.src, s.blocked_src ? tag::nChw16c : tag::nchw);
  d.weights = memory::desc(wei, t.weights, tag::oihw);
  d.bias = memory::desc({s.o}, t.dst, tag::x);
  d.dst = memory::desc(dst, t.dst, s.blocked_dst ? tag::nChw16c : tag::nchw);
  d.any_src = memory::desc(src, t.src, tag::any);
  d.any_weights = memory::desc(wei, t.weights, tag::any);
  d.any_dst = memory::desc(dst, t.dst, tag::any);
  d.strides = {s.sh, s.sw};
  d.pad_l = {s.ph, s.pw};
  // Right padding that makes the output exactly ho x wo (it can be smaller than the left with strides).
  d.pad_r = {(s.ho - 1) * s.sh + s.kh - s.h - s.ph, (s.wo - 1) * s.sw + s.kw - s.w - s.pw};
  return d;
}

// Primitive attributes: the scratchpad is ours to give (CallBuffers), not oneDNN's to allocate,
// and a relu epilogue when asked (a post-op on the accumulator: the bits of conv, then relu).
// With `accumulate`, a sum post-op adds the result to what the destination holds (a residual).
dnnl::primitive_attr primitive_attributes(bool relu = false, bool accumulate = false) {
  dnnl::primitive_attr attr = user_scratchpad_attributes();
  dnnl::post_ops ops;
  if (accumulate) ops.append_sum(1.f);
  if (relu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  if (accumulate || relu) attr.set_post_ops(ops);
  return attr;
}

dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, bool bias, bool relu = false,
                                                     bool winograd = false, bool accumulate = false) {
  auto make = [&](dnnl::prop_kind kind, dnnl::algorithm algorithm) -> dnnl::convolution_forward::primitive_desc {
    const auto desc = bias ? dnnl::convolution_forward::desc(kind, algorithm, d.any_src, d.any_weights, d.bias,
                                                             d.any_dst, d.strides, d.pad_l, d.pad_r)
                           : dnnl::convolution_forward::desc(kind, algorithm, d.any_src, d.any_weights, d.any_dst,
                                                             d.strides, d.pad_l, d.pad_r);
    return {desc, primitive_attributes(relu, accumulate), cpu_engine()};
  };
  if (winograd) {
    try {
      return make(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd);
    } catch (const dnnl::error&) {
      // No Winograd implementation for this shape or CPU: the direct convolution below.
    }
  }
  return make(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct);
}

// The user's buffer as `want`: itself when the layouts agree, otherwise a reordered copy.
memory as_layout(const memory::desc& user_md, void* data, const memory::desc& want, dnnl::stream& stream,
                 CallBuffers& buffers) {
  memory user(user_md, cpu_engine(), data);
  if (want == user_md) return user;
  memory converted = buffers.make(want);
  dnnl::reorder(user, converted).execute(stream, user, converted);
  return converted;
}

// Where a primitive writes an output: the user's buffer, or a scratch one reordered back by finish().
struct Output {
  memory user, target;
  void finish(dnnl::stream& stream) {
    if (target != user) dnnl::reorder(target, user).execute(stream, target, user);
  }
};
Output output_in(const memory::desc& user_md, void* data, const memory::desc& want, CallBuffers& buffers) {
  Output o{memory(user_md, cpu_engine(), data), memory()};
  o.target = want == user_md ? o.user : buffers.make(want);
  return o;
}

}  // namespace

void dnnl_conv_forward(const kernels::ConvGeometry& s, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  limit_threads_here();
  const Descs d = descs(s, {dnnl_type(x.dtype()), dnnl_type(w.dtype()), dnnl_type(y.dtype())});
  const auto pd = forward_pd(d, b.defined(), s.relu, s.winograd, s.accumulate);
  dnnl::stream stream(cpu_engine());
  CallBuffers buffers;
  memory src = as_layout(d.src, x.raw_data(), pd.src_desc(), stream, buffers);
  memory wei = as_layout(d.weights, w.raw_data(), pd.weights_desc(), stream, buffers);
  Output dst = output_in(d.dst, y.raw_data(), pd.dst_desc(), buffers);
  // The sum post-op reads the destination: in oneDNN's layout, if that is not the user's.
  if (s.accumulate && dst.target != dst.user) dnnl::reorder(dst.user, dst.target).execute(stream, dst.user, dst.target);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst.target}};
  if (b.defined()) args.emplace(DNNL_ARG_BIAS, memory(d.bias, cpu_engine(), b.raw_data()));
  execute_with_scratchpad(dnnl::convolution_forward(pd), pd, args, stream, buffers);
  dst.finish(stream);
  stream.wait();
}

void dnnl_conv_backward_data(const kernels::ConvGeometry& s, const Tensor& dy, const Tensor& w, const Tensor& dx) {
  limit_threads_here();
  const Descs d = descs(s, {dnnl_type(dx.dtype()), dnnl_type(w.dtype()), dnnl_type(dy.dtype())});
  const auto hint = forward_pd(d, false);
  const dnnl::convolution_backward_data::primitive_desc pd(
      dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, d.any_src, d.any_weights, d.any_dst,
                                            d.strides, d.pad_l, d.pad_r),
      primitive_attributes(), cpu_engine(), hint);
  dnnl::stream stream(cpu_engine());
  CallBuffers buffers;
  memory ddst = as_layout(d.dst, dy.raw_data(), pd.diff_dst_desc(), stream, buffers);
  memory wei = as_layout(d.weights, w.raw_data(), pd.weights_desc(), stream, buffers);
  Output dsrc = output_in(d.src, dx.raw_data(), pd.diff_src_desc(), buffers);
  execute_with_scratchpad(dnnl::convolution_backward_data(pd), pd,
                          {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dsrc.target}},
                          stream, buffers);
  dsrc.finish(stream);
  stream.wait();
}

void dnnl_conv_backward_weights(const kernels::ConvGeometry& s, const Tensor& dy, const Tensor& x, const Tensor& dw) {
  limit_threads_here();
  const Descs d = descs(s, {dnnl_type(x.dtype()), dnnl_type(dw.dtype()), dnnl_type(dy.dtype())});
  const auto hint = forward_pd(d, false);
  const dnnl::convolution_backward_weights::primitive_desc pd(
      dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, d.any_src, d.any_weights,
                                               d.any_dst, d.strides, d.pad_l, d.pad_r),
      primitive_attributes(), cpu_engine(), hint);
  dnnl::stream stream(cpu_engine());
  CallBuffers buffers;
  memory ddst = as_layout(d.dst, dy.raw_data(), pd.diff_dst_desc(), stream, buffers);
  memory src = as_layout(d.src, x.raw_data(), pd.src_desc(), stream, buffers);
  Output dwei = output_in(d.weights, dw.raw_data(), pd.diff_weights_desc(), buffers);
  execute_with_scratchpad(dnnl::convolution_backward_weights(pd), pd,
                          {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_WEIGHTS, dwei.target}},
                          stream, buffers);
  dwei.finish(stream);
  stream.wait();
}

}  // namespace troupe::cpu
