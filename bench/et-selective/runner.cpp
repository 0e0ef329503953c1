// The smallest useful ExecuTorch program for bench/et_selective.sh: load a
// .pte from a file, run its `forward` once on fixed inputs and write each
// tensor output's bytes to OUT_DIR/outputN.bin (so that the selective build
// can be checked against the full runtime's et_runner on the same inputs).
// C stdio only, no iostream: the binary's size is what is measured.
//
//   runner MODEL.pte OUT_DIR
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <executorch/extension/data_loader/file_data_loader.h>
#include <executorch/runtime/executor/method.h>
#include <executorch/runtime/executor/program.h>
#include <executorch/runtime/platform/runtime.h>

using executorch::aten::ScalarType;
using executorch::aten::TensorImpl;
using executorch::extension::FileDataLoader;
using executorch::runtime::EValue;
using executorch::runtime::Error;
using executorch::runtime::HierarchicalAllocator;
using executorch::runtime::MemoryAllocator;
using executorch::runtime::MemoryManager;
using executorch::runtime::Program;
using executorch::runtime::Span;
using executorch::runtime::Tag;

static int fail(const char* what, int code) {
  std::fprintf(stderr, "%s failed: 0x%x\n", what, code);
  return 1;
}

// The same inputs as et_runner gives a tensor without a file: sin(0.1 i)
// for floats, i mod 7 for integers.
static void fill(void* data, ScalarType t, size_t n) {
  for (size_t i = 0; i < n; i++) {
    switch (t) {
      case ScalarType::Float: ((float*)data)[i] = (float)std::sin(0.1 * (double)i); break;
      case ScalarType::Long: ((int64_t*)data)[i] = (int64_t)(i % 7); break;
      case ScalarType::Int: ((int32_t*)data)[i] = (int32_t)(i % 7); break;
      default: std::memset(data, 0, n * executorch::runtime::elementSize(t)); return;
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL.pte OUT_DIR\n", argv[0]);
    return 2;
  }
  executorch::runtime::runtime_init();
  auto loader = FileDataLoader::from(argv[1]);
  if (!loader.ok()) return fail("FileDataLoader::from", (int)loader.error());
  auto program = Program::load(&loader.get());
  if (!program.ok()) return fail("Program::load", (int)program.error());
  auto meta = program->method_meta("forward");
  if (!meta.ok()) return fail("method_meta", (int)meta.error());

  size_t planned = meta->num_memory_planned_buffers();
  Span<uint8_t>* spans = (Span<uint8_t>*)std::calloc(planned + 1, sizeof(Span<uint8_t>));
  for (size_t i = 0; i < planned; i++) {
    size_t n = (size_t)meta->memory_planned_buffer_size(i).get();
    spans[i] = Span<uint8_t>((uint8_t*)std::malloc(n), n);
  }
  const size_t pool = 4 << 20;
  MemoryAllocator method_alloc(pool, (uint8_t*)std::malloc(pool));
  MemoryAllocator temp_alloc(pool, (uint8_t*)std::malloc(pool));
  HierarchicalAllocator planned_memory({spans, planned});
  MemoryManager memory(&method_alloc, &planned_memory, &temp_alloc);
  auto method = program->load_method("forward", &memory);
  if (!method.ok()) return fail("load_method", (int)method.error());

  for (size_t i = 0; i < meta->num_inputs(); i++) {
    if (meta->input_tag(i).get() != Tag::Tensor) continue;
    auto tm = meta->input_tensor_meta(i).get();
    size_t bytes = tm.nbytes();
    void* data = std::malloc(bytes);
    fill(data, tm.scalar_type(), bytes / executorch::runtime::elementSize(tm.scalar_type()));
    // The sizes and dim order are the program's; they live as long as it.
    auto* impl = new TensorImpl(tm.scalar_type(), (ssize_t)tm.sizes().size(),
        const_cast<TensorImpl::SizesType*>(tm.sizes().data()), data,
        const_cast<TensorImpl::DimOrderType*>(tm.dim_order().data()));
    Error e = method->set_input(EValue(executorch::aten::Tensor(impl)), i);
    if (e != Error::Ok) return fail("set_input", (int)e);
  }
  Error e = method->execute();
  if (e != Error::Ok) return fail("execute", (int)e);

  char path[4096];
  for (size_t i = 0; i < method->outputs_size(); i++) {
    const EValue& v = method->get_output(i);
    if (!v.isTensor()) continue;
    std::snprintf(path, sizeof path, "%s/output%zu.bin", argv[2], i);
    FILE* f = std::fopen(path, "wb");
    if (!f) return fail("fopen", errno);
    auto t = v.toTensor();
    std::fwrite(t.const_data_ptr(), 1, t.nbytes(), f);
    std::fclose(f);
  }
  return 0;
}
