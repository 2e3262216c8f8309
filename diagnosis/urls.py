from django.contrib.auth import views as auth_views
from django.urls import path

from diagnosis import evidence_views, views

urlpatterns = [
    path("login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", views.kernel_list, name="kernel-list"),
    path("kernels/new/", views.kernel_upload, name="kernel-upload"),
    path("kernels/<int:pk>/", views.kernel_detail, name="kernel-detail"),
    path("kernels/<int:pk>/upload/", views.version_upload, name="version-upload"),
    path("versions/<int:pk>/", views.version_detail, name="version-detail"),
    path("runs/<int:pk>/", views.run_detail, name="run-detail"),
    path("runs/<int:pk>/evidence/", evidence_views.run_evidence, name="run-evidence"),
    path("runs/<int:pk>/passes/", evidence_views.run_passes, name="run-passes"),
    path("runs/<int:pk>/profile/", evidence_views.run_profile, name="run-profile"),
    path("artefacts/<int:pk>/", views.artefact_detail, name="artefact-detail"),
    path("artefacts/<int:pk>/raw/", views.artefact_raw, name="artefact-raw"),
    path("proposals/<int:pk>/", views.proposal_detail, name="proposal-detail"),
    path("proposals/<int:pk>/decide/", views.proposal_decide, name="proposal-decide"),
    path("reviews/", views.review_queue, name="review-queue"),
    path("teams/", views.team_list, name="team-list"),
    path("teams/<int:pk>/patterns/", views.team_patterns, name="team-patterns"),
]
