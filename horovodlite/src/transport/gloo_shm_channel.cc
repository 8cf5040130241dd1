#include "transport/gloo_shm_channel.h"

#include <sys/uio.h>

#include <cerrno>

namespace horovodlite {
namespace transport {

const uint64_t kProbeWord = kMagic;

int read_remote(pid_t pid, uint64_t addr, void* dst, size_t n) {
  size_t done = 0;
  while (done < n) {
    iovec local{static_cast<uint8_t*>(dst) + done, n - done};
    iovec remote{reinterpret_cast<void*>(addr + done), n - done};
    const ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno;
    if (got == 0) return EFAULT;
    done += static_cast<size_t>(got);
  }
  return 0;
}

void ShmChannel::take(const std::shared_ptr<ShmOp>& op, const MsgHeader& desc) {
  std::atomic<uint64_t>& m = peer_taken[desc.id % kTakenSlots];
  if (desc.kind != kMoved) {
    uint64_t cur = m.load(std::memory_order_acquire);
    if (cur == mark(desc.id, kRevoked) ||
        !m.compare_exchange_strong(cur, mark(desc.id, kReading), std::memory_order_acq_rel)) {
      revoked[desc.id] = op;
      return;
    }
  }
  int err = 0;
  if (desc.bytes != op->bytes) {
    op->error = size_mismatch(desc.bytes, op->bytes);
  } else if ((err = read_remote(peer_pid, desc.addr, op->buf, op->bytes)) != 0) {
    op->error = Status::Aborted("transport (gloo, shared memory): " + op->describe() + " failed: reading its " +
                                std::to_string(op->bytes) + " bytes from the peer's memory: " + std::strerror(err));
  }
  op->complete = true;
  m.store(mark(desc.id, static_cast<uint64_t>(std::min(err, 0xfd))), std::memory_order_release);
}

void ShmChannel::check_taken() {
  for (auto it = remote_sends.begin(); it != remote_sends.end();) {
    const uint64_t mark = my_taken[it->first % kTakenSlots].load(std::memory_order_acquire);
    if (mark >> 8 != it->first + 1) {
      ++it;
      continue;
    }
    ShmOp* op = it->second.get();
    if ((mark & 0xff) == kReading || (mark & 0xff) == kRevoked) {
      ++it;  // being read, or revoked (its copy is read next)
      continue;
    }
    if ((mark & 0xff) != 0) {
      op->error = Status::Aborted("transport (gloo, shared memory): " + op->describe() +
                                  " failed: the peer could not read it from this process's memory: " +
                                  std::strerror(static_cast<int>(mark & 0xff)));
    }
    op->complete = true;
    it = remote_sends.erase(it);
  }
}

void ShmChannel::control_message(const MsgHeader& h) {
  if (h.kind == kRemote) {
    std::shared_ptr<ShmOp> op = pop_first(&recvs, h.slot);
    if (!op) {
      auto early_msg = std::make_shared<ShmEarly>();
      early_msg->remote = true;
      early_msg->desc = h;
      early_msg->complete = true;
      early[h.slot].push_back(std::move(early_msg));
      return;
    }
    take(op, h);
  } else if (h.kind == kMoved) {
    auto w = revoked.find(h.id);
    if (w != revoked.end()) {  // its receive was matched and waits for this
      std::shared_ptr<ShmOp> op = std::move(w->second);
      revoked.erase(w);
      take(op, h);
      return;
    }
    for (auto& kv : early) {
      for (auto& e : kv.second) {
        if (e->remote && e->desc.id == h.id) e->desc = h;  // kMoved: read the copy, no claim
      }
    }
  }
}

}  // namespace transport
}  // namespace horovodlite
