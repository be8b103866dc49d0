// The XRT calls of host.card.XrtCard (docs/vitis.md, "The host's calls, XRT"): XRT's Python
// bindings have no xrt::ip, so a user-managed kernel's registers are reached through this
// shim, compiled by host/card.py against $XILINX_XRT (g++ -std=c++17 -shared -fPIC
// -lxrt_coreutil). Not compiled on the project's machines (no XRT there).
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

#include "xrt/xrt_bo.h"
#include "xrt/xrt_device.h"
#include "experimental/xrt_ip.h"
#include "experimental/xrt_xclbin.h"

namespace {

struct Card {
  xrt::device device;
  xrt::ip ip;
  xrt::bo buffer;
};

void report(char* error, size_t size, const std::string& message) {
  if (error && size) {
    std::strncpy(error, message.c_str(), size - 1);
    error[size - 1] = '\0';
  }
}

}  // namespace

extern "C" {

// The card `index` with `xclbin` loaded, the compute unit `kernel` ("dataflow:{dataflow_1}")
// as an xrt::ip, and one buffer of `bytes` in the first memory bank the xclbin uses (the
// link configuration puts every m_axi port of the kernel on that range). NULL on failure,
// with the reason in `error`.
void* eagle_open(unsigned index, const char* xclbin, const char* kernel, size_t bytes,
                 char* error, size_t error_size) {
  try {
    auto card = std::make_unique<Card>();
    card->device = xrt::device(index);
    auto uuid = card->device.load_xclbin(xclbin);
    card->ip = xrt::ip(card->device, uuid, kernel);
    int bank = -1;
    for (auto& mem : xrt::xclbin(xclbin).get_mems()) {
      if (mem.get_used()) {
        bank = mem.get_index();
        break;
      }
    }
    if (bank < 0) {
      report(error, error_size, "the xclbin uses no memory bank");
      return nullptr;
    }
    card->buffer = xrt::bo(card->device, bytes, xrt::bo::flags::normal,
                           static_cast<xrt::memory_group>(bank));
    return card.release();
  } catch (const std::exception& e) {
    report(error, error_size, e.what());
    return nullptr;
  }
}

uint64_t eagle_address(void* handle) {
  return static_cast<Card*>(handle)->buffer.address();
}

int eagle_write_register(void* handle, uint32_t offset, uint32_t value) {
  try {
    static_cast<Card*>(handle)->ip.write_register(offset, value);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

int eagle_read_register(void* handle, uint32_t offset, uint32_t* value) {
  try {
    *value = static_cast<Card*>(handle)->ip.read_register(offset);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

// Bytes into the buffer at `offset`, then synced to the card.
int eagle_write(void* handle, size_t offset, const void* data, size_t size) {
  try {
    auto& buffer = static_cast<Card*>(handle)->buffer;
    buffer.write(data, size, offset);
    buffer.sync(XCL_BO_SYNC_BO_TO_DEVICE, size, offset);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

// Bytes of the buffer at `offset`, synced from the card first.
int eagle_read(void* handle, size_t offset, void* data, size_t size) {
  try {
    auto& buffer = static_cast<Card*>(handle)->buffer;
    buffer.sync(XCL_BO_SYNC_BO_FROM_DEVICE, size, offset);
    buffer.read(data, size, offset);
    return 0;
  } catch (const std::exception&) {
    return 1;
  }
}

void eagle_close(void* handle) {
  delete static_cast<Card*>(handle);
}

}  // extern "C"
