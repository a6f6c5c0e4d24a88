#pragma once
// The window's one pattern for slow work (a Python start-up, an ssh probe, a worker's hello):
// the work runs on a thread of its own and its result comes back to the GUI thread as a queued
// call, dropped when `context` is gone by then. The GUI thread never waits and never nests an
// event loop. Call from the GUI thread.
#include <QObject>
#include <QPointer>

#include <functional>
#include <utility>

namespace devicerace::ui {

namespace detail {
/// Posts `call` to the GUI thread unless the application is already being destroyed.
/// Thread-safe.
void postToGuiThread(std::function<void()> call);
/// Starts `work` on a detached thread.
void startDetached(std::function<void()> work);
} // namespace detail

/// Runs `work()` off the GUI thread, then `done(result)` on it if `context` still exists.
template <typename Work, typename Done>
void runInBackground(QObject* context, Work work, Done done) {
    QPointer<QObject> guard(context);
    detail::startDetached([guard, work = std::move(work), done = std::move(done)]() mutable {
        auto result = work();
        detail::postToGuiThread([guard, done = std::move(done), result = std::move(result)]() mutable {
            if (guard) {
                done(std::move(result));
            }
        });
    });
}

} // namespace devicerace::ui
