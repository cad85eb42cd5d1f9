// Runtime -> compile-time switches (after flash-attention's static_switch.h).
//
//   BOOL_SWITCH(tile_needs_mask, kMask, [&] { softmax_tile<kMask>(...); });
//
// expands the lambda twice, once with `constexpr bool kMask = true` and once with false,
// and calls the one that matches the runtime value. Usable in host and device code.
#pragma once

#define BOOL_SWITCH(COND, CONST_NAME, ...)      \
  [&] {                                         \
    if (COND) {                                 \
      constexpr bool CONST_NAME = true;         \
      return __VA_ARGS__();                     \
    } else {                                    \
      constexpr bool CONST_NAME = false;        \
      return __VA_ARGS__();                     \
    }                                           \
  }()
