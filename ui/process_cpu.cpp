#include "process_cpu.h"

#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <QDir>
#include <QFile>
#include <QStringList>

#include <map>
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

// Whether this kernel lists each thread's children (/proc/PID/task/TID/children), asked once.
bool haveChildrenFiles() {
    static const bool have = QFile::exists(QStringLiteral("/proc/self/task/%1/children").arg(getpid()));
    return have;
}

// The direct children of `pid`, from its threads' children files.
std::vector<pid_t> childrenOf(pid_t pid) {
    std::vector<pid_t> out;
    const QDir tasks(QStringLiteral("/proc/%1/task").arg(pid));
    for (const auto& tid : tasks.entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        for (const auto& child : readSmallFile(tasks.filePath(tid + QStringLiteral("/children"))).split(' ')) {
            bool ok = false;
            const auto id = child.trimmed().toInt(&ok);
            if (ok && id > 0) {
                out.push_back(id);
            }
        }
    }
    return out;
}

// Every process's children, from one scan of every process's parent (a kernel without the files).
std::multimap<pid_t, pid_t> childrenByParent() {
    std::multimap<pid_t, pid_t> out;
    for (const auto& entry : QDir(QStringLiteral("/proc")).entryList(QDir::Dirs | QDir::NoDotAndDotDot)) {
        bool ok = false;
        const auto id = entry.toInt(&ok);
        if (!ok) {
            continue;
        }
        if (const auto f = statFields(id); f.size() > 1) { // field 4: the parent
            out.emplace(static_cast<pid_t>(f[1].toInt()), id);
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

double processTreeCpuSeconds(ChildLookup how) {
    rusage waited{};
    getrusage(RUSAGE_CHILDREN, &waited);
    double total = processCpuSeconds() + seconds(waited.ru_utime) + seconds(waited.ru_stime);
    const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
    if (ticks <= 0) {
        return total;
    }
    const bool files = how == ChildLookup::Auto ? haveChildrenFiles() : how == ChildLookup::ChildrenFiles;
    const auto byParent = files ? std::multimap<pid_t, pid_t>() : childrenByParent();
    const auto children = [&](pid_t pid) {
        if (files) {
            return childrenOf(pid);
        }
        std::vector<pid_t> out;
        for (auto [it, end] = byParent.equal_range(pid); it != end; ++it) {
            out.push_back(it->second);
        }
        return out;
    };
    std::vector<pid_t> pending = children(getpid());
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
        for (const auto child : children(pid)) {
            pending.push_back(child);
        }
    }
    return total;
}

} // namespace devicerace::ui
