// Asio's C++20 coroutine support, for the files of tcp/ that define coroutines.
//
// GCC 12 with -fsanitize=address reports -Wmismatched-new-delete at the end of every
// coroutine whose frame Asio allocates through its promise's operator new/delete (a
// false positive: both come from awaitable_frame_base). Under -Werror that would fail
// the sanitizer build, so it is silenced here, for these translation units only.
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <asio/awaitable.hpp>
#include <asio/co_spawn.hpp>
#include <asio/redirect_error.hpp>
#include <asio/use_awaitable.hpp>
