// A second engine thread that runs one job at a time.  The executor gives it half of a large
// allreduce, to reduce over a second connection to the same ranks while the engine thread
// reduces the other half: one rank's sockets then carry data while its cores add up the other
// half, which a single blocking collective leaves idle.
// Used by fuse/engine/executor.pyx.
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

namespace fuse {

class Lane {
 public:
  using Job = int (*)(void* arg);

  Lane() : thread_([this] { run(); }) {}

  ~Lane() {
    {
      std::lock_guard<std::mutex> guard(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  // Hand over a job; the lane must be idle (every start is followed by a wait).
  void start(Job job, void* arg) {
    {
      std::lock_guard<std::mutex> guard(mu_);
      job_ = job;
      arg_ = arg;
      done_ = false;
    }
    cv_.notify_all();
  }

  // Block until the job handed over by start() returns; its return code.
  int wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    return rc_;
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || job_ != nullptr; });
      if (stop_) return;
      Job job = job_;
      void* arg = arg_;
      job_ = nullptr;
      lock.unlock();
      int rc = job(arg);
      lock.lock();
      rc_ = rc;
      done_ = true;
      cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  Job job_ = nullptr;
  void* arg_ = nullptr;
  bool done_ = true;
  bool stop_ = false;
  int rc_ = 0;
  std::thread thread_;   // last: it starts running once everything above is built
};

inline Lane* lane_new() { return new Lane(); }
inline void lane_free(Lane* lane) { delete lane; }

}  // namespace fuse
