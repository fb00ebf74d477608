# The README's code samples are compiled, so they cannot rot:
#   hetps_readme_example(<name> <output file>)
# writes the fenced block that follows "<!-- example: <name> -->" in README.md to the file.

set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/README.md)

function(hetps_readme_example name output)
  file(READ ${PROJECT_SOURCE_DIR}/README.md readme)
  string(FIND "${readme}" "<!-- example: ${name} -->" begin)
  if(begin EQUAL -1)
    message(FATAL_ERROR "README.md has no example '${name}'")
  endif()
  string(SUBSTRING "${readme}" ${begin} -1 rest)
  string(FIND "${rest}" "<!-- end example -->" end)
  string(SUBSTRING "${rest}" 0 ${end} block)
  string(REGEX REPLACE "^[^\n]*\n```[a-z]*\n" "" block "${block}")
  string(REGEX REPLACE "```[ \n]*$" "" block "${block}")
  file(CONFIGURE OUTPUT ${output} CONTENT "${block}" @ONLY)
endfunction()
