// Built by CTest, once per NUMAPLACE_MISMATCH_* case with WILL_FAIL (an element-type mismatch between a
// partition and the allocator, where() or first_touch() must not compile), and once with no case defined
// as the control (the same code with matching types must compile, so a failure above is the mismatch).
#include <numaplace/allocator.hpp>
#include <numaplace/parallel_for.hpp>
#include <numaplace/where.hpp>

#include <vector>

int main() {
    using namespace numaplace;
    partition<double> doubles(1000);
    std::vector<double> data(1000);
#if defined(NUMAPLACE_MISMATCH_allocator)
    partition<float> floats(1000);
    partitioned_allocator<double> a(floats); // a partition of float for an allocator of double
#elif defined(NUMAPLACE_MISMATCH_allocator_with_fallback)
    partitioned_allocator<double> a(partition<float>(1000), fallback::degrade);
#elif defined(NUMAPLACE_MISMATCH_rows)
    partitioned_allocator<double> a(partition<char>::rows(1000, 8)); // 8-byte rows of char are not doubles
#elif defined(NUMAPLACE_MISMATCH_where)
    partitioned_allocator<double> a(doubles);
    std::vector<float> f(1000);
    (void)where(f.data(), doubles);
#elif defined(NUMAPLACE_MISMATCH_first_touch)
    partitioned_allocator<double> a(doubles);
    std::vector<int> i(1000);
    first_touch(i.data(), doubles);
#else
    partitioned_allocator<double> a(doubles);
    (void)where(data.data(), doubles);
    first_touch(data.data(), doubles);
#endif
    std::vector<double, partitioned_allocator<double>> v(1000, a);
    return v.size() == 1000 ? 0 : 1;
}
