#pragma once
/// Typed errors the engine throws. Every message says what, where and what to do;
/// front ends print what() as one line. Thread-safe (immutable values).
#include <stdexcept>
#include <string>

namespace devicerace {

/// Base of every error the engine raises on purpose.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// A bad option or value given by the user (CLI: exit status 2).
class UsageError : public Error {
public:
    using Error::Error;
};

/// A data file or folder that is missing, unreadable or malformed (CLI: exit status 2).
class DataError : public Error {
public:
    using Error::Error;
};

} // namespace devicerace
