#include <chorus/chorus.hpp>
