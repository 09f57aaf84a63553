// One public or detail header alone in a translation unit, for the layering checks (layering.sh, rules in
// layering.txt): preprocessed with -H, so that everything the header pulls in, however deep, is listed,
// whatever includes the including file adds later. NUMAPLACE_HEADER is <numaplace/x.hpp>.
#ifndef NUMAPLACE_HEADER
#error "define NUMAPLACE_HEADER as <numaplace/x.hpp>"
#endif
#include NUMAPLACE_HEADER

int main() { return 0; }
