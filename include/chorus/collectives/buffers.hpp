#pragma once
//! \file collectives/buffers.hpp
//! The buffer forms of the collectives: every call of collectives/*.hpp
//! (and, under nvcc, its stream-ordered form, collectives/gpu_stream.hpp)
//! also takes containers and other contiguous buffers where it takes a
//! std::span: std::vector, std::array, cuda::std::span,
//! thrust::device_vector / host_vector (no raw_pointer_cast), anything with
//! `data()` (a pointer, or a fancy pointer with `.get()`) and `size()`
//! (detail::buffer_like). Each such argument is viewed as a std::span and
//! the span form is called, so the rules are the span form's.
//!
//!   std::vector<float> grad(n);
//!   chorus::all_reduce(comm, grad);                         // in place, sum
//!   chorus::all_gather(comm, mine, all);                    // vectors both
//!   chorus::all_reduce(comm, d_grad, chorus::avg{}, stream) // thrust::device_vector on a GPU
//!
//! An owning container passed as a temporary is refused (its storage would
//! not outlive the call, nor an _async call's future); views (spans of
//! other libraries) may be temporaries. A std::mdspan with an exhaustive
//! layout is passed as std::span(m.data_handle(), m.size()).

#include <cstddef>
#include <span>
#include <type_traits>
#include <utility>

#include "../algo/automatic.hpp"
#include "../core/communicator.hpp"
#include "all_gather.hpp"
#include "all_gatherv.hpp"
#include "all_reduce.hpp"
#include "all_to_all.hpp"
#include "all_to_allv.hpp"
#include "broadcast.hpp"
#include "checks.hpp"
#include "p2p.hpp"
#include "reduce.hpp"
#include "reduce_scatter.hpp"
#include "reduce_scatterv.hpp"

namespace chorus {

namespace detail {
//! An argument a buffer form accepts in a buffer's place: not a buffer at
//! all, an lvalue buffer, or a trivially copyable view (a span of another
//! library) — never an owning temporary.
template <class A>
concept buffer_arg = !buffer_like<A> || std::is_lvalue_reference_v<A> || std::is_trivially_copyable_v<std::remove_cvref_t<A>>;

//! The arguments of a buffer form: at least one buffer, which the call
//! views as a span. The rest (spans, operators, roots, peers, streams)
//! pass through.
template <class... A>
concept has_buffer_like = (buffer_like<A> || ...);

template <class A>
constexpr decltype(auto) view(A&& a) {
    if constexpr (buffer_like<A>) {
        using P = decltype(buffer_data(a));
        return std::span<std::remove_pointer_t<P>>(buffer_data(a), static_cast<std::size_t>(a.size()));
    } else {
        return std::forward<A>(a);
    }
}
} // namespace detail

// One buffer form per collective, written once: a call with at least one
// buffer argument forwards to the span form with every buffer viewed. The
// constraint checks has_buffer_like first, so the inner call (spans only)
// never considers these again.
#define CHORUS_BUFFER_FORM(attr, name)                                                                                 \
    template <class Algo = automatic, class B, class... A>                                                             \
        requires(detail::has_buffer_like<A...> &&                                                                      \
                 requires(communicator<B>& c, A&&... x) { name<Algo>(c, detail::view(std::forward<A>(x))...); })       \
    attr decltype(auto) name(communicator<B>& comm, A&&... a) {                                                        \
        static_assert((detail::buffer_arg<A> && ...), "chorus: " #name ": an owning container passed as a temporary " \
                                                      "would not outlive the call; pass a named container or a span");\
        return name<Algo>(comm, detail::view(std::forward<A>(a))...);                                                  \
    }

CHORUS_BUFFER_FORM(, all_reduce)
CHORUS_BUFFER_FORM([[nodiscard]], all_reduce_async)
CHORUS_BUFFER_FORM(, all_gather)
CHORUS_BUFFER_FORM([[nodiscard]], all_gather_async)
CHORUS_BUFFER_FORM(, reduce_scatter)
CHORUS_BUFFER_FORM([[nodiscard]], reduce_scatter_async)
CHORUS_BUFFER_FORM(, broadcast)
CHORUS_BUFFER_FORM([[nodiscard]], broadcast_async)
CHORUS_BUFFER_FORM(, reduce)
CHORUS_BUFFER_FORM([[nodiscard]], reduce_async)
CHORUS_BUFFER_FORM(, all_to_all)
CHORUS_BUFFER_FORM([[nodiscard]], all_to_all_async)
CHORUS_BUFFER_FORM(, all_gatherv)
CHORUS_BUFFER_FORM([[nodiscard]], all_gatherv_async)
CHORUS_BUFFER_FORM(, reduce_scatterv)
CHORUS_BUFFER_FORM([[nodiscard]], reduce_scatterv_async)
CHORUS_BUFFER_FORM(, all_to_allv)
CHORUS_BUFFER_FORM([[nodiscard]], all_to_allv_async)
#undef CHORUS_BUFFER_FORM

// send/recv have no policy argument.
#define CHORUS_BUFFER_FORM_P2P(attr, name)                                                                             \
    template <class B, class A>                                                                                        \
        requires(detail::buffer_like<A> &&                                                                             \
                 requires(communicator<B>& c, A&& x) { name(c, detail::view(std::forward<A>(x)), 0); })               \
    attr decltype(auto) name(communicator<B>& comm, A&& buf, int peer) {                                               \
        static_assert(detail::buffer_arg<A>, "chorus: " #name ": an owning container passed as a temporary "          \
                                             "would not outlive the call; pass a named container or a span");         \
        return name(comm, detail::view(std::forward<A>(buf)), peer);                                                   \
    }
CHORUS_BUFFER_FORM_P2P(, send)
CHORUS_BUFFER_FORM_P2P([[nodiscard]], send_async)
CHORUS_BUFFER_FORM_P2P(, recv)
CHORUS_BUFFER_FORM_P2P([[nodiscard]], recv_async)
#undef CHORUS_BUFFER_FORM_P2P

} // namespace chorus
