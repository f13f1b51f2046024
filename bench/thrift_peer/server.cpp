// The peer of bench/thrift_front.py: idl/recommend.thrift served by Apache Thrift's C++ library (0.17, Debian's
// libthrift-dev) in its non-blocking server (TNonblockingServer: libevent, framed transport), with the same
// trivial handler as `tern bench thrift-front` (crates/tern-bench/src/thrift_front.rs): min(n, 100) accounts
// counting up from the viewer's, stepping over a Chaining call's profile, scores 1, 1/2, 1/3, ..., no source
// reports, not partial, model "trivial". No thread manager, so calls are answered on the I/O threads, as tern
// answers them on its I/O loops.
//
//   server --listen 127.0.0.1:PORT [--io-threads N] [--protocol binary|compact]
//
// Built by bench/thrift_front.py against the code `thrift --gen cpp idl/recommend.thrift` generates. It stops
// on SIGTERM or SIGINT (their default action: there is nothing to flush).

#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/protocol/TCompactProtocol.h>
#include <thrift/server/TNonblockingServer.h>
#include <thrift/transport/TNonblockingServerSocket.h>

#include "Recommend.h"

using apache::thrift::protocol::TBinaryProtocolFactory;
using apache::thrift::protocol::TCompactProtocolFactory;
using apache::thrift::protocol::TProtocolFactory;
using apache::thrift::server::TNonblockingServer;
using apache::thrift::transport::TNonblockingServerSocket;

namespace {

constexpr int32_t kMaxItems = 100;
const std::string kTrivial = "trivial";

// The fixed answer; `profile` is the viewer's own id for Suggested Users (never a candidate anyway).
void answer(Recommendations& out, int64_t viewer, int64_t profile, int32_t n) {
  const int32_t count = n < 0 ? 0 : (n > kMaxItems ? kMaxItems : n);
  out.items.resize(count);
  // Unsigned arithmetic wraps like the Rust side's wrapping_add (signed overflow is undefined).
  uint64_t account = static_cast<uint64_t>(viewer);
  for (int32_t rank = 1; rank <= count; ++rank) {
    if (static_cast<int64_t>(++account) == profile) ++account;
    Recommendation& item = out.items[rank - 1];
    item.account = static_cast<int64_t>(account);
    item.score = 1.0 / rank;
    item.source = kTrivial;
  }
  out.partial = false;
  out.sources.clear();
  out.model_version = kTrivial;
}

class TrivialHandler : public RecommendIf {
 public:
  void suggested_users(Recommendations& out, const SuggestedUsersRequest& request) override {
    answer(out, request.viewer, request.viewer, request.n);
  }
  void chaining(Recommendations& out, const ChainingRequest& request) override {
    answer(out, request.viewer, request.profile, request.n);
  }
};

[[noreturn]] void usage(const char* why) {
  std::cerr << why << "\nusage: server --listen HOST:PORT [--io-threads N] [--protocol binary|compact]\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string listen, protocol = "binary";
  int io_threads = 1;
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value of " + flag).c_str());
    const std::string value = argv[i + 1];
    if (flag == "--listen") listen = value;
    else if (flag == "--io-threads") io_threads = std::atoi(value.c_str());
    else if (flag == "--protocol") protocol = value;
    else usage(("unknown flag " + flag).c_str());
  }
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) usage("--listen HOST:PORT is required");
  if (io_threads < 1) usage("--io-threads must be at least 1");
  std::shared_ptr<TProtocolFactory> protocols;
  if (protocol == "binary") protocols = std::make_shared<TBinaryProtocolFactory>();
  else if (protocol == "compact") protocols = std::make_shared<TCompactProtocolFactory>();
  else usage("--protocol is binary or compact");

  auto socket = std::make_shared<TNonblockingServerSocket>(listen.substr(0, colon),
                                                           std::atoi(listen.c_str() + colon + 1));
  auto processor = std::make_shared<RecommendProcessor>(std::make_shared<TrivialHandler>());
  TNonblockingServer server(processor, protocols, socket);
  server.setNumIOThreads(io_threads);
  std::cout << "thrift peer (" << protocol << ", " << io_threads << " I/O threads) listening on " << listen
            << std::endl;
  server.serve();
  return 0;
}
