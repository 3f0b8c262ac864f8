/* json_native.h — crier.json's encoder in C, for the rules' Lua state.
 *
 * crier_json_native_register(L) puts the encoder in package.loaded as
 * "crier.json_native"; lua/crier/json.lua's json.encode calls it first when it
 * is there (in crier's own process, not in nginx or busted) and runs its own
 * encoder when it returns nothing. It returns exactly json.lua's text, or
 * nothing for any value json.lua would refuse (so the error and its path come
 * from json.lua). Its arguments: (value, json.null, json.empty_array,
 * json.array_mt, json.max_depth). */
#ifndef CRIER_JSON_NATIVE_H
#define CRIER_JSON_NATIVE_H

#include <lua.h>

void crier_json_native_register(lua_State *L);

#endif
