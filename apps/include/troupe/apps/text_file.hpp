#pragma once
// Reading a whole file the user named (a corpus, a metrics file, a trace), with the one-line errors
// the apps give.

#include <string>

namespace troupe::apps {

/// The bytes of `path`; throws troupe::Error(io) naming it when it is missing, a folder or
/// unreadable, ending with `expected` (what to pass instead, e.g. "--data takes a text file").
std::string read_text_file(const std::string& path, const std::string& expected);

}  // namespace troupe::apps
