// The timeline's event buffer (rank 0 only), for the engine modules (fuse/_core.pyx,
// loop.pyx, coordinator.pyx, executor.pyx, results.pyx; declared in fuse/engine/csupport.pxd).
//
// The engine thread records small structs behind a mutex; a Python writer thread calls
// tl_drain() every ~100 ms, which swaps the buffer out under the lock and formats the events as
// Chrome-trace JSON objects outside it.  When the timeline is off the engine pays one relaxed
// atomic load per event site (tl_on).  No Python API here: everything runs without the GIL.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace fuse {

// What an event is; the name written to the file is derived from it (and the kind).
enum TlWhat : uint8_t {
  TLW_NEGOTIATE = 0,  // NEGOTIATE_<KIND>
  TLW_TOP,            // <KIND>: the whole life of the tensor after negotiation
  TLW_QUEUE,          // ready on every rank -> execution starts
  TLW_MEMCPY_IN,      // MEMCPY_IN_FUSION_BUFFER
  TLW_BACKEND,        // <BACKEND>_<KIND>: the backend collective
  TLW_MEMCPY_OUT,     // MEMCPY_OUT_FUSION_BUFFER
  TLW_INLINE,         // INLINE_<KIND>: the coordinator computed the result
  TLW_TICK,           // a rank reported the tensor ready (name: the rank)
  TLW_CYCLE,          // CYCLE_START
  TLW_META,           // process_name / process_sort_index of a tensor
  TLW_CLOSE,          // closes a span still open when the timeline stops
  TLW_SHM,            // SHM_<KIND>: reduced through same-host shared memory, not the backend
  TLW_HIER,           // HIERARCHICAL_<KIND>: inside each host, then across hosts
  TLW_COUNTER,        // a counter track of the timeline itself (text: its name NUL args JSON)
};

struct TlEvent {
  int64_t ts;        // microseconds since the timeline started
  int32_t pid;       // tensor index (0: the timeline itself)
  int32_t num;       // the collective kind, or the rank of a tick
  char ph;           // 'B', 'E', 'X', 'i', 'M'
  uint8_t what;
  std::string text;  // TLW_META: the tensor name; final 'E' of TLW_TOP: dtype NUL shape
};

struct Timeline {
  std::atomic<int> active{0};
  std::atomic<int> mark_cycles{0};
  std::mutex m;
  std::vector<TlEvent> events;
  std::unordered_map<std::string, int32_t> pids;  // tensor name -> pid
  std::vector<std::vector<std::pair<uint8_t, int>>> open;  // per pid: open spans (what, kind)
  std::string backend;                             // "GLOO", "MPI", ...
  std::chrono::steady_clock::time_point t0;
  int64_t epoch_us = 0;
};

inline Timeline* tl_new() { return new Timeline(); }
inline void tl_free(Timeline* t) { delete t; }
inline bool tl_on(Timeline* t) { return t->active.load(std::memory_order_relaxed) != 0; }
inline bool tl_cycles_on(Timeline* t) {
  return t->active.load(std::memory_order_relaxed) && t->mark_cycles.load(std::memory_order_relaxed);
}

inline int64_t tl_now_locked(Timeline* t) {
  using namespace std::chrono;
  return duration_cast<microseconds>(steady_clock::now() - t->t0).count();
}

inline void tl_push_locked(Timeline* t, int64_t ts, int32_t pid, char ph, uint8_t what,
                           int32_t num, const std::string& text = std::string()) {
  t->events.push_back(TlEvent{ts, pid, num, ph, what, text});
}

// The tensor's pid, announcing it (metadata) the first time it is seen in this timeline.
inline int32_t tl_pid_locked(Timeline* t, const std::string& name) {
  auto it = t->pids.find(name);
  if (it != t->pids.end()) return it->second;
  int32_t pid = (int32_t)t->pids.size() + 1;
  t->pids.emplace(name, pid);
  t->open.resize((size_t)pid + 1);
  tl_push_locked(t, 0, pid, 'M', TLW_META, 0, name);
  return pid;
}

// Start recording (the caller drained and wrote whatever an earlier run left).
inline void tl_start(Timeline* t, bool mark_cycles, const std::string& backend) {
  std::lock_guard<std::mutex> g(t->m);
  t->events.clear();
  t->pids.clear();
  t->open.assign(1, {});
  t->backend = backend;
  t->t0 = std::chrono::steady_clock::now();
  t->epoch_us = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
  tl_push_locked(t, 0, 0, 'M', TLW_META, 0, std::string());
  t->mark_cycles.store(mark_cycles ? 1 : 0);
  t->active.store(1);
}

// Stop recording; spans still open (tensors in flight) are closed now so the trace is whole.
inline void tl_stop(Timeline* t) {
  std::lock_guard<std::mutex> g(t->m);
  if (!t->active.load()) return;
  t->active.store(0);
  int64_t now = tl_now_locked(t);
  for (size_t pid = 1; pid < t->open.size(); ++pid)
    for (; !t->open[pid].empty(); t->open[pid].pop_back())
      tl_push_locked(t, now, (int32_t)pid, 'E', t->open[pid].back().first, t->open[pid].back().second);
}

// Keeps the stack of open spans of tensor `pid`: a 'B' opens one, an 'E' closes the innermost.
// False for an 'E' without its 'B' (the timeline started while the tensor was in flight),
// which is then not written.
inline bool tl_track_locked(Timeline* t, int32_t pid, char ph, uint8_t what, int kind) {
  if (ph == 'B') {
    t->open[pid].emplace_back(what, kind);
    return true;
  }
  if (t->open[pid].empty()) return false;
  t->open[pid].pop_back();
  return true;
}

// One span boundary for one tensor (kept by tl_track_locked).
// tensor was in flight) is dropped.  `args` (final E only): dtype, then shape.
inline void tl_span(Timeline* t, const std::string& name, char ph, uint8_t what, int kind,
                    const std::string& args = std::string()) {
  std::lock_guard<std::mutex> g(t->m);
  if (!t->active.load(std::memory_order_relaxed)) return;
  int32_t pid = tl_pid_locked(t, name);
  if (tl_track_locked(t, pid, ph, what, kind))
    tl_push_locked(t, tl_now_locked(t), pid, ph, what, kind, args);
}

// The same boundary for every tensor of a fused response: one lock, one timestamp.
inline void tl_span_all(Timeline* t, const std::vector<std::string>& names, char ph,
                        uint8_t what, int kind) {
  std::lock_guard<std::mutex> g(t->m);
  if (!t->active.load(std::memory_order_relaxed)) return;
  int64_t now = tl_now_locked(t);
  for (const std::string& name : names) {
    int32_t pid = tl_pid_locked(t, name);
    if (tl_track_locked(t, pid, ph, what, kind)) tl_push_locked(t, now, pid, ph, what, kind);
  }
}

// The tensor is done: close every span still open for it, innermost first; the outermost
// (its <KIND> span) carries `args` (dtype NUL shape).  Called before the handle completes, so a
// user thread that then stops the timeline finds the tensor's events complete.
inline void tl_close(Timeline* t, const std::string& name, const std::string& args) {
  std::lock_guard<std::mutex> g(t->m);
  if (!t->active.load(std::memory_order_relaxed)) return;
  auto it = t->pids.find(name);
  if (it == t->pids.end()) return;
  auto& open = t->open[it->second];
  int64_t now = tl_now_locked(t);
  for (; !open.empty(); open.pop_back())
    tl_push_locked(t, now, it->second, 'E', open.back().first, open.back().second,
                   open.size() == 1 ? args : std::string());
}

inline void tl_tick(Timeline* t, const std::string& name, int rank) {
  std::lock_guard<std::mutex> g(t->m);
  if (!t->active.load(std::memory_order_relaxed)) return;
  int32_t pid = tl_pid_locked(t, name);
  if (t->open[pid].empty()) return;  // negotiation began before the timeline did
  tl_push_locked(t, tl_now_locked(t), pid, 'X', TLW_TICK, rank);
}

// Microseconds on the timeline's clock (for a cycle marker stamped when the cycle began).
inline int64_t tl_clock(Timeline* t) {
  std::lock_guard<std::mutex> g(t->m);
  return tl_now_locked(t);
}

inline void tl_cycle(Timeline* t, int64_t ts) {
  std::lock_guard<std::mutex> g(t->m);
  if (!t->active.load(std::memory_order_relaxed) || ts < 0) return;
  tl_push_locked(t, ts, 0, 'i', TLW_CYCLE, 0);
}

// A value per series on a counter track of pid 0 (Chrome's 'C' event): `series` names, in
// the order of `values` (the straggler meter's per-rank lateness, for instance).
inline void tl_counter(Timeline* t, const std::string& name,
                       const std::vector<std::string>& series, const std::vector<double>& values) {
  std::lock_guard<std::mutex> g(t->m);
  if (!t->active.load(std::memory_order_relaxed)) return;
  std::string text = name;
  text.push_back('\0');
  char num[48];
  for (size_t i = 0; i < series.size() && i < values.size(); ++i) {
    if (i) text.push_back(',');
    text.push_back('"');
    text.append(series[i]);
    std::snprintf(num, sizeof num, "\":%.6g", values[i]);
    text.append(num);
  }
  tl_push_locked(t, tl_now_locked(t), 0, 'C', TLW_COUNTER, 0, text);
}

inline const char* tl_kind_upper(int kind) {
  static const char* names[] = {"ALLREDUCE", "ALLGATHER",  "BROADCAST",       "ALLTOALL",
                                "REDUCESCATTER", "BARRIER", "JOIN", "ADD_PROCESS_SET",
                                "REMOVE_PROCESS_SET"};
  return (kind >= 0 && kind < 9) ? names[kind] : "UNKNOWN";
}

inline void tl_json_str(std::string& out, const std::string& s) {
  out.push_back('"');
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back((char)c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out.append(buf);
    } else {
      out.push_back((char)c);
    }
  }
  out.push_back('"');
}

inline void tl_format(std::string& out, const TlEvent& e, const std::string& backend,
                      int64_t epoch_us) {
  char head[96];
  if (e.what == TLW_META) {
    if (e.pid == 0) {
      std::snprintf(head, sizeof head, "%lld", (long long)epoch_us);
      out.append("{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"fuse\","
                 "\"start_time_since_epoch_in_micros\":");
      out.append(head);
      out.append("}}");
      return;
    }
    std::snprintf(head, sizeof head, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,"
                  "\"args\":{\"name\":", e.pid);
    out.append(head);
    tl_json_str(out, e.text);
    std::snprintf(head, sizeof head, "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\","
                  "\"pid\":%d,\"args\":{\"sort_index\":%d}}", e.pid, e.pid);
    out.append(head);
    return;
  }
  if (e.what == TLW_COUNTER) {
    size_t cut = e.text.find('\0');
    out.append("{\"name\":");
    tl_json_str(out, e.text.substr(0, cut));
    std::snprintf(head, sizeof head, ",\"ph\":\"C\",\"ts\":%lld,\"pid\":0,\"args\":{",
                  (long long)e.ts);
    out.append(head);
    if (cut != std::string::npos) out.append(e.text.substr(cut + 1));
    out.append("}}");
    return;
  }
  out.append("{\"name\":\"");
  switch (e.what) {
    case TLW_NEGOTIATE: out.append("NEGOTIATE_"); out.append(tl_kind_upper(e.num)); break;
    case TLW_TOP: out.append(tl_kind_upper(e.num)); break;
    case TLW_QUEUE: out.append("QUEUE"); break;
    case TLW_MEMCPY_IN: out.append("MEMCPY_IN_FUSION_BUFFER"); break;
    case TLW_BACKEND: out.append(backend); out.push_back('_'); out.append(tl_kind_upper(e.num)); break;
    case TLW_MEMCPY_OUT: out.append("MEMCPY_OUT_FUSION_BUFFER"); break;
    case TLW_INLINE: out.append("INLINE_"); out.append(tl_kind_upper(e.num)); break;
    case TLW_SHM: out.append("SHM_"); out.append(tl_kind_upper(e.num)); break;
    case TLW_HIER: out.append("HIERARCHICAL_"); out.append(tl_kind_upper(e.num)); break;
    case TLW_TICK: out.append(std::to_string(e.num)); break;
    case TLW_CYCLE: out.append("CYCLE_START"); break;
    case TLW_CLOSE: out.append("TIMELINE_STOPPED"); break;
    default: break;
  }
  std::snprintf(head, sizeof head, "\",\"ph\":\"%c\",\"ts\":%lld,\"pid\":%d,\"tid\":0", e.ph,
                (long long)e.ts, e.pid);
  out.append(head);
  if (e.ph == 'X') out.append(",\"dur\":0");
  if (e.ph == 'i') out.append(",\"s\":\"g\"");
  if (e.ph == 'E' && e.what == TLW_TOP && !e.text.empty()) {
    size_t cut = e.text.find('\0');
    out.append(",\"args\":{\"dtype\":");
    tl_json_str(out, e.text.substr(0, cut));
    out.append(",\"shape\":");
    tl_json_str(out, cut == std::string::npos ? std::string() : e.text.substr(cut + 1));
    out.push_back('}');
  }
  out.push_back('}');
}

// Everything recorded since the last call, as JSON objects separated by ",\n" (empty: none).
inline std::string tl_drain(Timeline* t) {
  std::vector<TlEvent> batch;
  std::string backend;
  int64_t epoch;
  {
    std::lock_guard<std::mutex> g(t->m);
    batch.swap(t->events);
    backend = t->backend;
    epoch = t->epoch_us;
  }
  std::string out;
  out.reserve(batch.size() * 72);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (i) out.append(",\n");
    tl_format(out, batch[i], backend, epoch);
  }
  return out;
}

}  // namespace fuse
