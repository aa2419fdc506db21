# Build-time step (cmake -P): turns one HTML page into a C source holding its
# bytes and its Content-Security-Policy. The page's one inline <script> and
# one inline <style> are allowed by their SHA-256 hashes, so the policy can
# forbid every other script and style, inline or not.
# usage: cmake -DIN=page.html -DOUT=page.c -DNAME=chat -P embed_page.cmake
cmake_minimum_required(VERSION 3.21) # file(COPY_FILE)

# Base64 of the bytes that a hex string spells (CSP wants base64 digests).
function(hex_to_base64 hex out)
  set(abc "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
  string(LENGTH "${hex}" n)
  set(b64 "")
  set(i 0)
  while(i LESS n)
    math(EXPR left "${n} - ${i}")
    set(take 6)
    if(left LESS 6)
      set(take ${left})
    endif()
    string(SUBSTRING "${hex}" ${i} ${take} group)
    # Pad the last group to 3 bytes; its missing characters become "=".
    set(pad 0)
    while(take LESS 6)
      string(APPEND group "00")
      math(EXPR take "${take} + 2")
      math(EXPR pad "${pad} + 1")
    endwhile()
    math(EXPR v "0x${group}")
    foreach(shift 18 12 6 0)
      math(EXPR k "(${v} >> ${shift}) & 63")
      string(SUBSTRING "${abc}" ${k} 1 ch)
      string(APPEND b64 "${ch}")
    endforeach()
    if(pad GREATER 0)
      string(LENGTH "${b64}" m)
      math(EXPR m "${m} - ${pad}")
      string(SUBSTRING "${b64}" 0 ${m} b64)
      foreach(_ RANGE 1 ${pad})
        string(APPEND b64 "=")
      endforeach()
    endif()
    math(EXPR i "${i} + 6")
  endwhile()
  set(${out} "${b64}" PARENT_SCOPE)
endfunction()

# The CSP source for the text between <tag> and </tag> ('none' if absent).
function(inline_hash html tag out)
  string(FIND "${html}" "<${tag}>" a)
  string(FIND "${html}" "</${tag}>" b)
  if(a LESS 0 OR b LESS a)
    set(${out} "'none'" PARENT_SCOPE)
    return()
  endif()
  string(LENGTH "<${tag}>" open)
  math(EXPR a "${a} + ${open}")
  math(EXPR len "${b} - ${a}")
  string(SUBSTRING "${html}" ${a} ${len} body)
  string(SHA256 hex "${body}")
  hex_to_base64("${hex}" b64)
  set(${out} "'sha256-${b64}'" PARENT_SCOPE)
endfunction()

file(READ "${IN}" html)
inline_hash("${html}" script script_src)
inline_hash("${html}" style style_src)
set(csp "default-src 'none'; script-src ${script_src}; style-src ${style_src}; \
connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")

file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REPEAT "0x..," 16 row) # CMake's regex has no {16}
string(REGEX REPLACE "(${row})" "\\1\n    " body "${body}")
file(WRITE "${OUT}.tmp"
  "/* Generated from ${IN} by cmake/embed_page.cmake: do not edit. */\n"
  "#include <stddef.h>\n\n"
  "const unsigned char srv_page_${NAME}[] = {\n    ${body}0x00};\n"
  "const size_t srv_page_${NAME}_len = ${bytes};\n"
  "const char srv_page_${NAME}_csp[] = \"${csp}\";\n")
# Only a changed page rebuilds the object.
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
