// How values that came from outside (arch strings, file names, JSON strings, environment
// variables, floats) appear inside messages. Such text can hold terminal escape sequences,
// invalid UTF-8 or a megabyte of anything; a message must show what was given without letting
// the bytes act on the reader's terminal or flood the log.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace flashjit {

// Input bytes echoed before the rest is cut: enough for any path or option value a person
// types, small enough that one bad value cannot bury the message.
inline constexpr std::size_t kMaxEchoBytes = 256;

// `text` safe to print: printable ASCII and valid UTF-8 characters pass through; control
// characters (C0, DEL, C1), Unicode bidirectional overrides, invalid UTF-8 and the backslash
// itself are written as \xNN, one per byte (so the output names the exact input bytes). At most
// `max_bytes` input bytes are shown, never cutting a character; longer input ends with
// "... (N bytes)", N being the whole input's size.
std::string printable(std::string_view text, std::size_t max_bytes = kMaxEchoBytes);

// The shortest text that reads back as the same value ("-1e-30", "0.125", "nan", "inf"), so a
// message never shows a tiny or huge number as "-0.000000" or rounds it to another value.
std::string printable(double value);
std::string printable(float value);

}  // namespace flashjit
