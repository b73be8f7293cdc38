// DLPack in both directions, through nanobind's ndarray: a Buffer exported as a DLPack tensor
// (numpy/CuPy/torch.from_dlpack), and what an array handed to Buffer.from_array really is
// (address, size, device, layout), read from its __dlpack__ capsule or buffer protocol.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>

#include "core/buffer.h"
#include "core/error.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

using ByteTensor = nb::ndarray<nb::array_api, uint8_t, nb::ndim<1>>;
using AnyTensor = nb::ndarray<nb::ro>;

// The buffer's bytes as a 1-D uint8 DLPack tensor: kDLCPU (pageable), kDLCUDAHost (pinned) or
// kDLCUDA with the buffer's GPU. `owner` (the Python Buffer) stays alive while any consumer holds it.
ByteTensor buffer_dlpack(const gdrlab::Buffer& b, nb::handle owner) {
  int type = nb::device::cpu::value;
  int id = 0;
  if (b.kind() == gdrlab::MemKind::Pinned) type = nb::device::cuda_host::value;
  if (b.kind() == gdrlab::MemKind::Device) {
    type = nb::device::cuda::value;
    id = b.device();
  }
  const size_t shape[1] = {b.size()};
  return ByteTensor(reinterpret_cast<void*>(b.address()), 1, shape, owner, nullptr, nb::dtype<uint8_t>(), type, id);
}

bool c_contiguous(const AnyTensor& t) {
  if (!t.stride_ptr()) return true;
  int64_t expect = 1;  // DLPack strides count elements, not bytes
  for (size_t i = t.ndim(); i-- > 0;) {
    if (t.shape(i) > 1 && t.stride(i) != expect) return false;
    expect *= static_cast<int64_t>(t.shape(i));
  }
  return true;
}

// (address, nbytes, device_type, device_id, c_contiguous, readonly, tensor): the tensor is the
// imported view, which keeps the producer's memory alive while it is held.
nb::tuple array_view(nb::handle obj) {
  nb::ndarray<> writable;
  AnyTensor t;
  bool readonly = false;
  if (nb::try_cast(obj, writable, false)) {
    t = AnyTensor(writable);
  } else if (nb::try_cast(obj, t, false)) {
    readonly = true;
  } else {
    gdrlab::throw_invalid("this array could be read neither through __dlpack__ nor the buffer protocol");
  }
  const auto address = reinterpret_cast<uintptr_t>(t.data());
  return nb::make_tuple(address, t.nbytes(), t.device_type(), t.device_id(), c_contiguous(t), readonly,
                        nb::cast(nb::ndarray<nb::array_api, nb::ro>(t)));
}

}  // namespace

void bind_dlpack(nb::module_& m) {
  m.def("buffer_dlpack", &buffer_dlpack, "buffer"_a, "owner"_a);
  m.def("array_view", &array_view, "array"_a);
  m.def("pointer_device", &gdrlab::pointer_device, "address"_a);
}
