#include "background_task.h"

#include <QCoreApplication>

#include <mutex>
#include <thread>

namespace devicerace::ui::detail {

namespace {
std::mutex g_mutex;
QCoreApplication* g_app = nullptr; // the application calls are posted to; null once it is going
} // namespace

void postToGuiThread(std::function<void()> call) {
    std::lock_guard lock(g_mutex);
    if (g_app) {
        // The GUI thread takes the mutex this thread releases after posting before it runs the
        // call: what the work wrote (the call and its result) is then ordered before the GUI
        // thread reads it, in terms ThreadSanitizer sees. Qt's event queue orders them too, but
        // through QtCore's own futex waits, which TSan does not see; it reported every race built
        // here (lanes, their records) as written by the work's thread without ordering.
        QMetaObject::invokeMethod(
            g_app,
            [call = std::move(call)] {
                { std::lock_guard published(g_mutex); }
                call();
            },
            Qt::QueuedConnection);
    }
}

void startDetached(std::function<void()> work) {
    {
        std::lock_guard lock(g_mutex);
        if (!g_app && QCoreApplication::instance()) {
            g_app = QCoreApplication::instance();
            // Work that finishes while (or after) the application goes posts nothing.
            QObject::connect(g_app, &QObject::destroyed, [] {
                std::lock_guard inner(g_mutex);
                g_app = nullptr;
            });
        }
    }
    std::thread(std::move(work)).detach();
}

} // namespace devicerace::ui::detail
