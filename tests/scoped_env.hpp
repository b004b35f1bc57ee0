#pragma once
// An environment variable set for one scope, shared by the unit and MPI
// tests that change chorus's configuration (CHORUS_*).

#include <cstdlib>
#include <optional>
#include <string>

namespace chorus_test {

//! Sets `name` to `value` (nullptr: unsets it) for the object's lifetime,
//! then restores the previous value (or unsets it).
class scoped_env {
public:
    scoped_env(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = std::string(old);
        if (value != nullptr) ::setenv(name, value, 1);
        else ::unsetenv(name);
    }
    ~scoped_env() {
        if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
        else ::unsetenv(name_.c_str());
    }
    scoped_env(const scoped_env&) = delete;
    scoped_env& operator=(const scoped_env&) = delete;

private:
    std::string name_;
    std::optional<std::string> old_;
};

} // namespace chorus_test
