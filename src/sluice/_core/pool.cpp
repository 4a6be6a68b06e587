// pool.cpp: the compiled core's worker threads (see WorkerPool in core.h).
#include "core.h"

#include <pthread.h>
#include <unistd.h>

#include <exception>
#include <string>

namespace sluice {

struct WorkerPool::Job {
    size_t n;
    const Item* item;
    std::atomic<size_t> next{0};
    size_t finished = 0;          // guarded by the pool's mutex
    size_t active = 0;            // workers inside work_on(job); guarded by the pool's mutex
    std::exception_ptr error;     // guarded by the pool's mutex
    std::condition_variable done;
};

WorkerPool::WorkerPool(size_t threads) : owner_pid_(static_cast<long>(::getpid())) {
    for (size_t k = 1; k < threads; ++k) {
        workers_.emplace_back([this] { loop(); });
        pthread_setname_np(workers_.back().native_handle(), "sluice-core");
    }
}

WorkerPool::~WorkerPool() { close(); }

void WorkerPool::close() {
    {
        std::lock_guard<std::mutex> lock(m_);
        if (stop_) return;
        stop_ = true;
    }
    wake_.notify_all();
    if (static_cast<long>(::getpid()) != owner_pid_) {   // fork copied none of these threads
        for (auto& t : workers_) t.detach();
        workers_.clear();
        return;
    }
    for (auto& t : workers_) t.join();
    workers_.clear();
}

// Takes and runs items of `job` until none is left; returns whether it ran any.
bool WorkerPool::work_on(Job& job) {
    bool ran = false;
    for (size_t i = job.next.fetch_add(1); i < job.n; i = job.next.fetch_add(1)) {
        ran = true;
        std::exception_ptr error;
        try {
            (*job.item)(i);
        } catch (...) {
            error = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(m_);
        if (error && !job.error) job.error = error;
        if (++job.finished == job.n) job.done.notify_all();
    }
    return ran;
}

void WorkerPool::loop() {
    for (;;) {
        Job* job = nullptr;
        {
            std::unique_lock<std::mutex> lock(m_);
            wake_.wait(lock, [&] {
                if (stop_) return true;
                for (Job* j : jobs_)
                    if (j->next.load() < j->n) { job = j; return true; }
                return false;
            });
            if (job == nullptr) return;   // stopped
            ++job->active;                // run() waits for this worker before the job (on its stack) goes
        }
        work_on(*job);
        std::lock_guard<std::mutex> lock(m_);
        if (--job->active == 0) job->done.notify_all();
    }
}

void WorkerPool::run(size_t n, const Item& item) {
    if (n == 0) return;
    Job job;
    job.n = n;
    job.item = &item;
    const bool alone = workers_.empty() || static_cast<long>(::getpid()) != owner_pid_;
    {
        std::lock_guard<std::mutex> lock(m_);
        if (stop_) throw std::runtime_error("WorkerPool.run: the pool is closed");
        if (!alone) jobs_.push_back(&job);
    }
    if (!alone) wake_.notify_all();
    work_on(job);
    std::unique_lock<std::mutex> lock(m_);
    job.done.wait(lock, [&] { return job.finished == job.n; });
    if (!alone) {
        for (auto it = jobs_.begin(); it != jobs_.end(); ++it)
            if (*it == &job) { jobs_.erase(it); break; }
        // a worker that picked the job as its last items went may still be inside work_on: the job lives until then
        job.done.wait(lock, [&] { return job.active == 0; });
    }
    if (job.error) std::rethrow_exception(job.error);
}

WorkerPool* pool_of(const py::object& pool) {
    return pool.is_none() ? nullptr : &pool.cast<WorkerPool&>();
}

void register_pool(py::module_& m) {
    py::class_<WorkerPool>(m, "WorkerPool",
                           "The compiled core's worker threads of one pipeline: batch kernels given it as `pool` run "
                           "their items on them and on the calling thread, the GIL released.")
        .def(py::init<size_t>(), py::arg("threads"))
        .def_property_readonly("threads", &WorkerPool::threads)
        .def("close", &WorkerPool::close, py::call_guard<py::gil_scoped_release>(),
             "Ends the worker threads (after the jobs running now).");
}

}  // namespace sluice
