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
        QMetaObject::invokeMethod(g_app, std::move(call), Qt::QueuedConnection);
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
