#include "ucx/ucx_wire.h"

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "core/budget.h"
#include "core/cuda_api.h"
#include "core/error.h"
#include "core/vocab.h"
#include "ucx/api.h"
#include "wire/frame.h"

namespace gdrlab {
namespace {

using Clock = std::chrono::steady_clock;
constexpr ucp::ucp_tag_t kDataTag = 0x6764726c6162ull;  // every data message of a test
constexpr size_t kMaxAddressBytes = 32 * 1024;           // a worker address with many interfaces stays far below
constexpr size_t kMaxInfoChars = 512;

[[noreturn]] void throw_ucx(const UcpApi& api, const char* call, int status) {
  // A failing endpoint (the peer went away) is the peer's end; anything else is UCX's own failure.
  const bool peer = status <= -20 && status >= -89;  // UCS_ERR_FIRST_LINK_FAILURE .. LAST_ENDPOINT_FAILURE
  throw Error(peer ? ErrorKind::PeerClosed : ErrorKind::System, "ucx", call, status, ucs_text(api, status));
}

std::string ucx_version();

// UCX's context, one per transport list and process (ucp_init reads the transports and devices
// once; the workers of every test share it).
ucp::ucp_context_h context_for(const std::string& tls, bool wakeup) {
  static std::mutex mu;
  static std::map<std::string, ucp::ucp_context_h> contexts;
  std::lock_guard<std::mutex> lock(mu);
  const std::string key = tls + (wakeup ? "|wakeup" : "");
  auto it = contexts.find(key);
  if (it != contexts.end()) return it->second;
  const UcpApi& api = ucp_api();
  require_ucx_transports(tls);
  ucp::ucp_config_t* cfg = nullptr;
  int st = api.config_read(nullptr, nullptr, &cfg);
  if (st != ucp::UCS_OK) throw_ucx(api, "ucp_config_read", st);
  if (!tls.empty()) {
    st = api.config_modify(cfg, "TLS", tls.c_str());
    if (st != ucp::UCS_OK) {
      api.config_release(cfg);
      throw_invalid("UCX refused the transport list '" + tls + "': " + ucs_text(api, st));
    }
  }
  ucp::ucp_params_t params{};
  params.field_mask = ucp::UCP_PARAM_FIELD_FEATURES | ucp::UCP_PARAM_FIELD_MT_WORKERS_SHARED | ucp::UCP_PARAM_FIELD_NAME;
  params.features = ucp::UCP_FEATURE_TAG | (wakeup ? ucp::UCP_FEATURE_WAKEUP : 0);
  params.mt_workers_shared = 1;  // a server's sessions (and a thread peer) create workers from several threads
  params.name = "gdrlab";
  ucp::ucp_context_h ctx = nullptr;
  st = api.init_version(1, 12, &params, cfg, &ctx);  // the API level this engine was written against
  api.config_release(cfg);
  if (st != ucp::UCS_OK) {
    if (!tls.empty())
      throw_unavailable("UCX could not start with UCX_TLS=" + tls + ": " + ucs_text(api, st) +
                        " (`ucx_info -d` lists the transports this UCX has)");
    throw_ucx(api, "ucp_init", st);
  }
  contexts[key] = ctx;
  return ctx;
}

// GPU memory needs a UCX transport for CUDA memory (cuda_copy, cuda_ipc) that actually loaded:
// a UCX whose CUDA module is missing, or built for another CUDA, only warns, and a transfer of GPU
// memory then never completes. Ask the context (ucp_context_query) and refuse at once instead.
void require_cuda_memory_type(ucp::ucp_context_h ctx, const std::string& tls) {
  const UcpApi& api = ucp_api();
  if (api.context_query == nullptr) return;  // a UCX without the query: nothing to ask
  ucp::ucp_context_attr_t attr{};
  attr.field_mask = ucp::UCP_ATTR_FIELD_MEMORY_TYPES;
  if (api.context_query(ctx, &attr) != ucp::UCS_OK) return;
  if (attr.memory_types & (1ull << ucp::UCS_MEMORY_TYPE_CUDA)) return;
  throw_unavailable("UCX " + ucx_version() + " has no transport for CUDA memory loaded" +
                    (tls.empty() ? std::string() : " with UCX_TLS=" + tls) +
                    " (its cuda_copy module is missing or was built for another CUDA): it cannot move GPU "
                    "memory here; `ucx_info -d` lists the transports this UCX has");
}

std::string ucx_version() {
  const UcxStatus st = ucx_status();
  return st.loaded ? st.version : "";
}

void on_ep_error(void* arg, ucp::ucp_ep_h, int status) {
  static_cast<std::atomic<int>*>(arg)->store(status);
}

// One side of one test: a worker, the endpoint to the peer's worker and the message buffer.
class UcxEndpoint : public TestEndpoint {
 public:
  UcxEndpoint(const std::string& tls, MemKind kind, const TestSpec& spec, ControlChannel& control, int timeout_ms,
              bool want_protocol)
      : api_(ucp_api()), control_(control), spec_(spec), kind_(kind), timeout_ms_(timeout_ms),
        want_protocol_(want_protocol) {
    // The buffer first: a missing GPU fails before UCX starts.
    buf_ = std::make_unique<Buffer>(kind, spec.size, static_cast<int>(spec.device));
    // Host memory: a side waits on UCX's event descriptor after a short spin, so two sides on one
    // busy machine do not starve each other; device memory spins, as ucx_perftest does (the
    // wake-up feature can narrow UCX's choice of GPU transports).
    const bool wakeup = kind != MemKind::Device;
    ucp::ucp_context_h ctx = context_for(tls, wakeup);
    if (kind == MemKind::Device) require_cuda_memory_type(ctx, tls);
    ucp::ucp_worker_params_t wp{};
    wp.field_mask = ucp::UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = ucp::UCS_THREAD_MODE_SINGLE;
    int st = api_.worker_create(ctx, &wp, &worker_);
    if (st != ucp::UCS_OK) throw_ucx(api_, "ucp_worker_create", st);
    ucp::ucp_address_t* addr = nullptr;
    size_t len = 0;
    st = api_.worker_get_address(worker_, &addr, &len);
    if (st != ucp::UCS_OK) {
      api_.worker_destroy(worker_);
      throw_ucx(api_, "ucp_worker_get_address", st);
    }
    address_.assign(reinterpret_cast<const char*>(addr), len);
    api_.worker_release_address(worker_, addr);
    if (wakeup && api_.worker_get_efd(worker_, &efd_) != ucp::UCS_OK) efd_ = -1;
  }

  ~UcxEndpoint() override {
    try {
      complete_sends();
    } catch (...) {
    }
    for (void* r : pending_) api_.request_free(r);  // still pending: UCX completes them as canceled
    if (ep_) {
      ucp::ucp_request_param_t p{};
      p.op_attr_mask = ucp::UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = ucp::UCP_EP_CLOSE_FLAG_FORCE;  // both sides are done: nothing is owed to the peer
      void* r = api_.ep_close_nbx(ep_, &p);
      if (r && !ucp::ptr_is_err(r)) {
        const Clock::time_point end = Clock::now() + std::chrono::milliseconds(2000);
        while (api_.request_check_status(r) == ucp::UCS_INPROGRESS && Clock::now() < end) api_.worker_progress(worker_);
        api_.request_free(r);
      }
    }
    api_.worker_destroy(worker_);
  }

  const std::string& address() const { return address_; }
  const std::string& protocol() const { return protocol_; }

  void connect(const std::string& peer_address) {
    ucp::ucp_ep_params_t p{};
    p.field_mask = ucp::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | ucp::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                   ucp::UCP_EP_PARAM_FIELD_ERR_HANDLER;
    p.address = reinterpret_cast<const ucp::ucp_address_t*>(peer_address.data());
    // PEER: a peer that goes away fails this endpoint's requests instead of stopping the process.
    p.err_mode = ucp::UCP_ERR_HANDLING_MODE_PEER;
    p.err_handler.cb = on_ep_error;
    p.err_handler.arg = &ep_error_;
    int st = api_.ep_create(worker_, &p, &ep_);
    if (st != ucp::UCS_OK) throw_ucx(api_, "ucp_ep_create", st);
  }

  void send(bool last) override {
    ucp::ucp_request_param_t p = param();
    // The verification message of the measuring side is asked to stay a request, so UCX can say
    // which protocol it chose for this size (ucp_request_query).
    const bool ask = last && want_protocol_ && api_.request_query;
    if (ask) {
      p.op_attr_mask |= ucp::UCP_OP_ATTR_FIELD_FLAGS;
      p.flags |= ucp::UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    }
    void* r = api_.tag_send_nbx(ep_, buf_->host_ptr(), spec_.size, kDataTag, &p);
    if (ucp::ptr_is_err(r)) throw_ucx(api_, "ucp_tag_send_nbx", ucp::ptr_status(r));
    if (ask && r) query_protocol(r);
    if (r) pending_.push_back(r);
    if (last) {
      complete_sends();
      flush();
      // The measuring side reads the peer's VERDICT next, over tcp: until it comes, keep UCX
      // going, which the peer may need to receive this message (a rendezvous).
      if (want_protocol_) wait_readable();
    } else if (pending_.size() >= 256) {
      wait(pending_.front(), "ucp_tag_send_nbx");
      pending_.pop_front();
    }
  }

  void recv() override {
    ucp::ucp_request_param_t p = param();
    void* r = api_.tag_recv_nbx(worker_, buf_->host_ptr(), spec_.size, kDataTag, ~ucp::ucp_tag_t{0}, &p);
    if (ucp::ptr_is_err(r)) throw_ucx(api_, "ucp_tag_recv_nbx", ucp::ptr_status(r));
    if (r) wait(r, "ucp_tag_recv_nbx");
  }

  // ACKs travel over the control connection, as on the tcp wire; before this side blocks on it,
  // everything it owes the peer over UCX has left (a UCX that is not progressed sends nothing).
  void send_ack() override {
    complete_sends();
    flush();
    control_.send_control(FrameType::Ack);
  }
  void expect_ack() override {
    complete_sends();
    flush();
    wait_readable();
    control_.expect(FrameType::Ack);
  }
  void settle() override {
    complete_sends();
    flush();
  }
  void finish() override {
    complete_sends();
    flush();
  }
  // The end of a test: neither side may take its worker away while the other still needs it (a
  // rendezvous' or a flush's last acknowledgement). The client says over tcp when it is done with
  // UCX, the server answers once it is, and each keeps progressing UCX while it waits.
  void client_done() {
    settle();
    control_.send_control(FrameType::Ack);
    wait_readable();
    control_.expect(FrameType::Ack);
  }
  void server_wait_done() {
    wait_readable();
    control_.expect(FrameType::Ack);
    control_.send_control(FrameType::Ack);
  }
  Buffer& user() override { return *buf_; }
  size_t offset() const override { return 0; }
  std::string describe() const override { return std::string(mem_kind_name(kind_)) + " memory (ucx wire)"; }

 private:
  ucp::ucp_request_param_t param() const {
    ucp::ucp_request_param_t p{};
    p.op_attr_mask = ucp::UCP_OP_ATTR_FIELD_MEMORY_TYPE;
    p.memory_type = kind_ == MemKind::Device ? ucp::UCS_MEMORY_TYPE_CUDA : ucp::UCS_MEMORY_TYPE_HOST;
    return p;
  }

  void query_protocol(void* r) {
    char text[kMaxInfoChars] = {0};
    ucp::ucp_request_attr_t a{};
    a.field_mask = ucp::UCP_REQUEST_ATTR_FIELD_INFO_STRING | ucp::UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE;
    a.debug_string = text;
    a.debug_string_size = sizeof text;
    if (api_.request_query(r, &a) == ucp::UCS_OK) protocol_.assign(text, strnlen(text, sizeof text));
  }

  // Progresses the worker until done() or `end`; false at `end`. Spins for kSpin after the last
  // event, then sleeps on UCX's event descriptor (and on `also_fd`, when given, returning as soon
  // as it is readable).
  template <class Done>
  bool progress_until(Done done, Clock::time_point end, int also_fd = -1) {
    constexpr auto kSpin = std::chrono::microseconds(50);
    Clock::time_point spin_end = Clock::now() + kSpin;
    unsigned spins = 0;
    for (;;) {
      if (done()) return true;
      if (api_.worker_progress(worker_)) {
        spin_end = Clock::now() + kSpin;
        continue;
      }
      if ((++spins & 63) != 0) continue;
      const Clock::time_point now = Clock::now();
      if (now > end) return false;
      if (also_fd >= 0) {
        pollfd pfd{also_fd, POLLIN, 0};
        if (::poll(&pfd, 1, 0) != 0) return true;
      }
      if (efd_ < 0 || now < spin_end) continue;
      const int st = api_.worker_arm(worker_);
      if (st == ucp::UCS_ERR_BUSY) continue;  // events came meanwhile: progress them first
      if (st != ucp::UCS_OK) throw_ucx(api_, "ucp_worker_arm", st);
      pollfd fds[2] = {{efd_, POLLIN, 0}, {also_fd, POLLIN, 0}};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - now).count() + 1;
      ::poll(fds, also_fd >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(left, 100)));
      spin_end = Clock::now() + kSpin;
    }
  }

  // Progresses the worker until request r completes (then frees it); PeerTimeout past the timeout.
  void wait(void* r, const char* call) {
    const Clock::time_point end = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    int st = ucp::UCS_INPROGRESS;
    const bool done = progress_until([&] { return (st = api_.request_check_status(r)) != ucp::UCS_INPROGRESS; }, end);
    if (!done) {
      api_.request_cancel(worker_, r);
      while (api_.request_check_status(r) == ucp::UCS_INPROGRESS) api_.worker_progress(worker_);
      api_.request_free(r);
      throw Error(ErrorKind::PeerTimeout, "ucx", call, 0,
                  "no completion within " + std::to_string(timeout_ms_ / 1000.0) + " s over the ucx wire");
    }
    api_.request_free(r);
    if (st != ucp::UCS_OK) {
      int why = ep_error_.load();
      throw_ucx(api_, call, why ? why : st);
    }
  }

  void complete_sends() {
    while (!pending_.empty()) {
      void* r = pending_.front();
      pending_.pop_front();
      wait(r, "ucp_tag_send_nbx");
    }
  }

  void flush() {
    ucp::ucp_request_param_t p{};
    void* r = api_.ep_flush_nbx(ep_, &p);
    if (ucp::ptr_is_err(r)) throw_ucx(api_, "ucp_ep_flush_nbx", ucp::ptr_status(r));
    if (r) wait(r, "ucp_ep_flush_nbx");
  }

  // Progresses UCX while waiting for the next control frame: the peer may need this side's
  // UCX to answer (a rendezvous' acknowledgement) before it can send it.
  void wait_readable() {
    const Clock::time_point end = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    progress_until([] { return false; }, end, control_.socket().fd());  // at `end`, the read's own timeout says so
  }

  const UcpApi& api_;
  ControlChannel& control_;
  TestSpec spec_;
  MemKind kind_;
  int timeout_ms_;
  bool want_protocol_;
  std::unique_ptr<Buffer> buf_;
  ucp::ucp_worker_h worker_ = nullptr;
  ucp::ucp_ep_h ep_ = nullptr;
  std::string address_;
  std::string protocol_;
  std::deque<void*> pending_;
  std::atomic<int> ep_error_{0};
  int efd_ = -1;  // UCX's event descriptor (host memory), -1: spin only
};

MemKind kind_from_code(uint8_t code) {
  if (code >= static_cast<uint8_t>(MemKind::Max)) throw_protocol("unknown memory kind " + std::to_string(code));
  return static_cast<MemKind>(code);
}

void check_ucx_spec(const TestSpec& spec, MemKind kind) {
  check_spec_common(spec, "ucx");
  if (kind == MemKind::Device || kind == MemKind::Pinned) {
    std::string why;
    if (!cuda_usable(&why))
      throw_unavailable(std::string(mem_kind_name(kind)) + " memory needs CUDA: " + why);
  }
}

MemoryNeed ucx_serving_memory(const TestSpec& spec, MemKind kind) {
  return kind == MemKind::Device ? MemoryNeed{0, spec.size} : MemoryNeed{spec.size, 0};
}

}  // namespace

UcxClient::UcxClient(const std::string& host, int port, const std::string& token, int timeout_ms)
    : timeout_ms_(timeout_ms) {
  ucp_api();  // no UCX here: say so before connecting
  session_ = std::make_unique<ClientSession>(host, port, token, timeout_ms);
}

void UcxClient::close() {
  if (session_) session_->close();
}

UcxRunResult UcxClient::run(const TestSpec& spec, MemKind src, MemKind dst, const std::string& tls) {
  session_->wire();  // PeerClosed after close() or a dropped session
  check_ucx_spec(spec, src);
  if (dst >= MemKind::Max) throw_invalid("unknown memory kind for the server's side");
  UcxRunResult res;
  res.version = ucx_version();
  res.tls = tls;
  UcxEndpoint ep(tls, src, spec, session_->wire(), timeout_ms_, true);
  return session_->guarded([&](ControlChannel& w) {
    BodyWriter b;
    std::vector<uint8_t> s = encode_spec(spec);
    b.str(std::string(s.begin(), s.end()));
    b.u8(static_cast<uint8_t>(dst));
    b.str(ep.address());
    b.str(res.version);
    w.send_control(FrameType::UcxConnect, b.bytes());
    std::vector<uint8_t> reply = w.expect(FrameType::UcxConnect);
    BodyReader r(reply.data(), reply.size());
    std::string peer = r.str(kMaxAddressBytes);
    res.peer_version = r.text(64);
    r.done();
    ep.connect(peer);
    try {
      static_cast<RunResult&>(res) = run_client_test(w, ep, spec);
    } catch (const Error& e) {
      if (e.kind == ErrorKind::Verify) ep.client_done();  // the session goes on: end the test as usual
      throw;
    }
    ep.client_done();
    res.protocol = escape_controls(utf8_or_replace(ep.protocol()), kMaxInfoChars);
    return res;
  });
}

void add_ucx_wire(Server& server) {
  server.add_wire(FrameType::UcxConnect, [&server](ControlChannel& w, const std::vector<uint8_t>& body,
                                                    const RefusalLog& refused) {
    BodyReader r(body.data(), body.size());
    std::string spec_bytes = r.str(kMaxControlBytes);
    TestSpec spec = decode_spec(reinterpret_cast<const uint8_t*>(spec_bytes.data()), spec_bytes.size());
    MemKind kind = kind_from_code(r.u8());
    std::string peer = r.str(kMaxAddressBytes);
    r.text(64);  // the client's UCX version: said on its side
    r.done();
    spec.device = static_cast<uint32_t>(server.limits().device);  // this server's GPU, whatever was asked
    Reservation held;  // declared first: the buffer goes before its share returns
    std::unique_ptr<UcxEndpoint> ep;
    if (!build_or_refuse(w, refused, [&] {
          check_ucx_spec(spec, kind);
          held = server.budget().reserve(ucx_serving_memory(spec, kind));
          ep = std::make_unique<UcxEndpoint>("", kind, spec, w, 30000, false);
          ep->connect(peer);
        }))
      return;
    BodyWriter b;
    b.str(ep->address());
    b.str(ucx_version());
    w.send_control(FrameType::UcxConnect, b.bytes());
    try {
      run_server_test(w, *ep, spec);
      ep->server_wait_done();
    } catch (const Error& e) {
      // A UCX failure inside the test ends the test, not the session (as the verbs wire).
      if (e.kind != ErrorKind::System) throw;
      w.send_error(e);
    }
  });
}

}  // namespace gdrlab
