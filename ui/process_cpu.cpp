#include "process_cpu.h"

#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <QDir>
#include <QFile>
#include <QStringList>

#include <set>
#include <vector>

namespace devicerace::ui {

namespace {

double seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; }

QByteArray readSmallFile(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

// /proc/PID/stat's fields after the command's closing parenthesis (the command may hold spaces
// and parentheses): field 3 (state) is the first.
QList<QByteArray> statFields(pid_t pid) {
    const QByteArray text = readSmallFile(QStringLiteral("/proc/%1/stat").arg(pid));
    const auto close = text.lastIndexOf(')');
    return close < 0 ? QList<QByteArray>() : text.mid(close + 2).split(' ');
}

// The direct children of `pid`: its threads' children files, else (a kernel without them) a scan
// of every process's parent.
std::vector<pid_t> childrenOf(pid_t pid) {
    std::vector<pid_t> out;
    const QDir tasks(QStringLiteral("/proc/%1/task").arg(pid));
    bool haveFiles = false;
    for (const auto& tid : tasks.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        const QString path = tasks.filePath(tid + QStringLiteral("/children"));
        if (!QFile::exists(path)) {
            continue;
        }
        haveFiles = true;
        for (const auto& child : readSmallFile(path).split(' ')) {
            bool ok = false;
            const auto id = child.trimmed().toInt(&ok);
            if (ok && id > 0) {
                out.push_back(id);
            }
        }
    }
    if (haveFiles) {
        return out;
    }
    for (const auto& entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        bool ok = false;
        const auto id = entry.toInt(&ok);
        if (!ok) {
            continue;
        }
        const auto f = statFields(id);
        if (f.size() > 1 && f[1].toInt() == pid) { // field 4: the parent
            out.push_back(id);
        }
    }
    return out;
}

} // namespace

double processCpuSeconds() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return seconds(ru.ru_utime) + seconds(ru.ru_stime);
}

double processTreeCpuSeconds() {
    rusage waited{};
    getrusage(RUSAGE_CHILDREN, &waited);
    double total = processCpuSeconds() + seconds(waited.ru_utime) + seconds(waited.ru_stime);
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    if (ticks <= 0) {
        return total;
    }
    std::vector<pid_t> pending = childrenOf(getpid());
    std::set<pid_t> seen;
    while (!pending.empty()) {
        const pid_t pid = pending.back();
        pending.pop_back();
        if (!seen.insert(pid).second) {
            continue;
        }
        // fields 14-17: utime, stime, and its waited-for children's cutime, cstime (clock ticks)
        const auto f = statFields(pid);
        if (f.size() > 14) {
            total +=
                static_cast<double>(f[11].toLongLong() + f[12].toLongLong() + f[13].toLongLong() + f[14].toLongLong()) /
                ticks;
        }
        for (const auto child : childrenOf(pid)) {
            pending.push_back(child);
        }
    }
    return total;
}

} // namespace devicerace::ui
